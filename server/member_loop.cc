#include "server/member_loop.h"

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace pstrain {

ServerMemberLoop::ServerMemberLoop(int num_workers, ServerActions* actions)
    : actions_(actions), removed_(num_workers, false) {}

absl::StatusOr<std::optional<JobState>> ServerMemberLoop::Adopt(const ClusterNews& news) {
  if (news.job_state == DONE || news.job_state == ABORTED) return news.job_state;
  if (!news.leave.empty()) {
    spdlog::info("leaving the job: {}", news.leave);
    return DONE;
  }
  // Workers the scheduler declared dead leave the rounds and the read
  // guarantee; pulls that waited on them may now be answered.
  bool changed = false;
  for (int w : news.dead_workers) {
    if (w < 0 || w >= static_cast<int>(removed_.size()) || removed_[w]) continue;
    removed_[w] = true;
    changed = true;
    spdlog::warn("worker {} was declared dead: going on without it", w);
    actions_->RemoveWorker(w);
  }
  if (changed) actions_->WakePulls();
  // The cluster rolled back to a checkpoint (a server failed): load it.
  if (news.generation > actions_->generation()) {
    RETURN_IF_ERROR(actions_->Restore(news.generation, news.restore_clock, news.placement));
    // A restore may place the shard anew (a move's switch): the workers the
    // job went on without stay out of its rounds.
    for (int w = 0; w < static_cast<int>(removed_.size()); ++w) {
      if (removed_[w]) actions_->RemoveWorker(w);
    }
    routes_version_ = -1;  // a restore serves the server's own chunks: the routes again
    actions_->CancelParked(absl::FailedPreconditionError(
                               absl::StrCat("the cluster rolled back to clock ", news.restore_clock,
                                            " (generation ", news.generation, ")")),
                           news.generation);
  }
  // (After the restore: a switch's news names no move, and the switch
  // takes the handover of the one followed.)
  actions_->FollowMove(news.move, news.generation);
  if (news.routes.serving_size() > 0 && news.routes.version() != routes_version_) {
    routes_version_ = news.routes.version();
    actions_->SetRoutes(news.routes);
  }
  if (news.manifest_clock > pruned_before_) {
    pruned_before_ = news.manifest_clock;
    actions_->Prune(pruned_before_);
  }
  return std::nullopt;
}

}  // namespace pstrain
