#include "scheduler/pipeline_restarts.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/stage_plan.h"

namespace pstrain {

PipelineRestarts::PipelineRestarts(int num_workers, int stages) : stages_(std::max(1, stages)) {
  if (!pipelined()) return;
  for (int r = 0; r < num_workers / stages_; ++r) state_.add_replicas();
}

int PipelineRestarts::ReplicaOf(int worker) const { return pstrain::ReplicaOf(worker, stages_); }

void PipelineRestarts::Begin(int replica, const std::string& why, absl::Time now) {
  ReplicaLinks& links = *state_.mutable_replicas(replica);
  if (links.restarting()) return;
  links.set_link_generation(links.link_generation() + 1);
  links.set_restarting(true);
  links.set_since_unix_ms(absl::ToUnixMillis(now));
  PipelineRestart* r = state_.add_restarts();
  r->set_replica(replica);
  r->set_link_generation(links.link_generation());
  r->set_reason(why);
  r->set_begun_unix_ms(absl::ToUnixMillis(now));
  spdlog::warn(
      "replica {}'s pipeline restarts ({}): its stages go back to its slowest clock and link anew "
      "(link generation {})",
      replica, why, links.link_generation());
}

std::vector<std::string> PipelineRestarts::Pending(int replica, const Membership& members,
                                                   const std::function<bool(int)>& at_gate) const {
  std::vector<std::string> pending;
  for (int w = first_worker(replica); w < first_worker(replica) + stages_; ++w) {
    const MemberRecord* m = members.Get(WORKER, w);
    if (m == nullptr) {
      pending.push_back(absl::StrCat("worker ", w, " to register"));
    } else if (m->state == DEAD) {
      pending.push_back(
          absl::StrCat("worker ", w, " to come back or a replacement (ps_worker --id=", w, ")"));
    } else if (!at_gate(w)) {
      pending.push_back(
          absl::StrCat("worker ", w, " (stage ", StageOf(w, stages_), ") at the gate"));
    }
  }
  return pending;
}

void PipelineRestarts::End(int replica, int64_t clock, absl::Time now) {
  ReplicaLinks& links = *state_.mutable_replicas(replica);
  links.set_restarting(false);
  for (PipelineRestart& r : *state_.mutable_restarts()) {
    if (r.replica() != replica || r.link_generation() != links.link_generation()) continue;
    r.set_clock(clock);
    r.set_done_unix_ms(absl::ToUnixMillis(now));
  }
  spdlog::warn("replica {} restarts clock {} on links of link generation {}", replica, clock,
               links.link_generation());
}

void PipelineRestarts::RolledBack(int64_t clock, absl::Time now) {
  for (ReplicaLinks& links : *state_.mutable_replicas()) {
    links.set_link_generation(links.link_generation() + 1);
    links.set_restarting(false);
  }
  for (PipelineRestart& r : *state_.mutable_restarts()) {
    if (r.done_unix_ms() != 0) continue;
    r.set_clock(clock);
    r.set_done_unix_ms(absl::ToUnixMillis(now));
  }
}

std::optional<int> PipelineRestarts::Overdue(absl::Time now, absl::Duration timeout) const {
  for (int r = 0; r < state_.replicas_size(); ++r) {
    const ReplicaLinks& links = state_.replicas(r);
    if (links.restarting() && now - absl::FromUnixMillis(links.since_unix_ms()) > timeout) return r;
  }
  return std::nullopt;
}

void PipelineRestarts::AddWaits(const Membership& members, const std::function<bool(int)>& at_gate,
                                MemberStatus* out) const {
  for (int r = 0; r < state_.replicas_size(); ++r) {
    if (!restarting(r)) continue;
    Wait* w = out->add_waits();
    w->set_what(absl::StrCat("replica ", r, "'s pipeline restart (link generation ",
                             link_generation(r), "): waiting for ",
                             absl::StrJoin(Pending(r, members, at_gate), ", ")));
    w->set_since_unix_ms(state_.replicas(r).since_unix_ms());
  }
}

absl::Status PipelineRestarts::Restore(const PipelineRestartState& state) {
  if (state.replicas_size() != state_.replicas_size()) {
    return absl::InvalidArgumentError("the state does not fit the job's pipeline replicas");
  }
  for (const ReplicaLinks& links : state.replicas()) {
    if (links.link_generation() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("link generation ", links.link_generation(), " out of range for the job"));
    }
  }
  state_ = state;
  return absl::OkStatus();
}

}  // namespace pstrain
