#include "worker/member_loop.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace pstrain {

WorkerMemberLoop::WorkerMemberLoop(const JobSpec& job, int replica, int stages, int64_t generation,
                                   LoopActions* actions)
    : job_(job),
      replica_(replica),
      stages_(std::max(1, stages)),
      actions_(actions),
      generation_(generation),
      total_(TotalClocks(job)),
      schedule_(job) {}

absl::StatusOr<bool> WorkerMemberLoop::Adopt(const AdvanceClockResponse& gate, int64_t clock,
                                             bool connected) {
  live_.assign(gate.live_workers().begin(), gate.live_workers().end());
  if (gate.end_clock() > 0 && gate.end_clock() < total_ && gate.end_clock() >= clock) {
    spdlog::info("the job drains: it ends at clock {} (was {})", gate.end_clock(), total_);
    total_ = gate.end_clock();
  }
  checkpoint_asked_ = std::max(checkpoint_asked_, gate.checkpoint_clock());
  schedule_.Set({gate.consistency_changes().begin(), gate.consistency_changes().end()});
  const bool rolled_back = gate.generation() != generation_;
  const bool restarted =
      !rolled_back && connected && stages_ > 1 && gate.link_generation() != link_generation_;
  link_generation_ = gate.link_generation();
  if (rolled_back) {
    // A move's switch is a new generation too, at the clock reached.
    const int64_t placed = gate.cluster().placement().version();
    if (placed > placement_version_) {
      spdlog::info("placement {} in force (generation {}): going on from clock {}", placed,
                   gate.generation(), gate.resume_clock());
      placement_version_ = placed;
    } else {
      spdlog::warn("the cluster rolled back (generation {}): resuming at clock {} (was at {})",
                   gate.generation(), gate.resume_clock(), clock);
    }
    generation_ = gate.generation();
    actions_->ResumeAt(gate.resume_clock());
  }
  if (restarted) {
    spdlog::warn(
        "replica {}'s pipeline restarted (link generation {}): resuming at clock {} (was at {})",
        replica_, link_generation_, gate.resume_clock(), clock);
    actions_->ResumeAt(gate.resume_clock());
    RETURN_IF_ERROR(actions_->Relink(gate.cluster(), link_generation_));
    return true;
  }
  if (rolled_back || !connected) {
    if (!connected) {
      // (A rollback's clock when it came with the first answer.)
      const int64_t start = rolled_back ? gate.resume_clock() : clock;
      spdlog::info("cluster complete: {} servers, {} workers; {} clocks ({} per epoch){}",
                   job_.num_servers(), job_.num_workers(), total_, ClocksPerEpoch(job_),
                   start > 0 ? absl::StrCat("; starting at clock ", start) : "");
    }
    RETURN_IF_ERROR(actions_->Connect(gate.cluster()));
  }
  actions_->SetPushContext(CurrentPushContext());
  return rolled_back;
}

PushContext WorkerMemberLoop::CurrentPushContext() const {
  PushContext context;
  context.checkpoint_clock = checkpoint_asked_;
  if (job_.consistency() == BSP) {
    for (const ConsistencyChange& c : schedule_.changes()) {
      context.at_once.emplace_back(c.clock(), c.consistency() != BSP);
    }
  }
  return context;
}

absl::Status WorkerMemberLoop::BatchShare(int* num_shares, int* share_index) const {
  *num_shares = job_.num_workers() / stages_;
  *share_index = replica_;
  if (live_.empty()) return absl::OkStatus();  // no answer yet: every replica
  std::vector<int> replicas;
  for (int w : live_) {
    if (replicas.empty() || replicas.back() != w / stages_) replicas.push_back(w / stages_);
  }
  *num_shares = static_cast<int>(replicas.size());
  *share_index =
      static_cast<int>(std::find(replicas.begin(), replicas.end(), replica_) - replicas.begin());
  if (*share_index == *num_shares) return absl::FailedPreconditionError("this worker is not live");
  return absl::OkStatus();
}

bool WorkerMemberLoop::MayRelink(const absl::Status& failure) {
  const absl::StatusCode code = failure.code();
  return code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kAborted ||
         code == absl::StatusCode::kDeadlineExceeded || code == absl::StatusCode::kCancelled;
}

bool WorkerWatch::Step(const WorkerNews& news) {
  if (stopped_) return true;
  if (news.shutdown || news.job_state == ABORTED) {
    stopped_ = true;
    actions_->Stop();
    // A stage that hangs on a neighbour whose link does not break must not
    // hang this worker.
    actions_->CancelLinks(absl::CancelledError("the worker stopped"));
    return true;
  }
  actions_->InterruptLinks(news.link_generation);
  return false;
}

}  // namespace pstrain
