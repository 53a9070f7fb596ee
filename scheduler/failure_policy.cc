#include "scheduler/failure_policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/stage_plan.h"

namespace pstrain {
namespace {

Decision Make(Decision::Kind kind, std::string why, int replica = -1) {
  return Decision{kind, std::move(why), replica};
}

}  // namespace

const char* WorkerFailureName(WorkerFailure f) {
  return f == WorkerFailure::kShrink ? "shrink" : f == WorkerFailure::kAbort ? "abort" : "wait";
}

FailurePolicy::FailurePolicy(const JobSpec& job, const SchedulerPolicy& policy, Membership* members,
                             ClockTable* clocks, Promotions* promotions, PlacementMoves* moves)
    : policy_(policy),
      checkpoints_(job.checkpoint_every() > 0),
      stages_(std::max(1, job.pipeline_stages())),
      num_workers_(job.num_workers()),
      members_(members),
      clocks_(clocks),
      promotions_(promotions != nullptr && promotions->enabled() ? promotions : nullptr),
      moves_(moves) {}

bool FailurePolicy::KeepsPlace(Role role) const {
  return role == SERVER ? checkpoints_ || promotions_ != nullptr
                        : policy_.on_worker_failure == WorkerFailure::kWait;
}

bool FailurePolicy::Silent(const MemberRecord& m, absl::Time now) const {
  return !Gone(m.state) && now - m.last_seen > policy_.heartbeat_timeout;
}

Decision FailurePolicy::DeclareDead(MemberRecord& m, JobState job, absl::Time now) {
  const absl::Duration silent = now - m.last_seen;
  const std::string why = absl::StrCat(
      "no heartbeat for ", absl::FormatDuration(absl::Trunc(silent, absl::Milliseconds(100))),
      " (--heartbeat_timeout_ms=", absl::ToInt64Milliseconds(policy_.heartbeat_timeout), ")");
  m.Declare(DEAD, why, now);
  state_.set_deaths(state_.deaths() + 1);
  spdlog::error("{} {} at {} declared dead: {}", RoleName(m.role), m.id, m.address, why);
  if (m.role == WORKER) {
    Decision d = WorkerDied(m, why, job, now);
    if (d.kind != Decision::kAbort || !d.why.empty()) return d;
  } else if (job == RUNNING_JOB) {
    if (std::optional<Decision> out = OutOfJob(m, now)) return *out;
    Decision d = ServerLost(m, absl::StrCat("declared dead: ", why));
    if (d.kind != Decision::kAbort) return d;
  }
  return Make(Decision::kAbort, absl::StrCat(RoleName(m.role), " ", m.id, " at ", m.address,
                                             " declared dead: ", why));
}

// A worker declared dead; kAbort without a message when the job cannot go
// on without it.
Decision FailurePolicy::WorkerDied(const MemberRecord& m, const std::string& why, JobState job,
                                   absl::Time now) {
  const std::string reason = absl::StrCat("worker ", m.id, " declared dead: ", why);
  if (job == RUNNING_JOB && KeepsPlace(WORKER)) {
    spdlog::warn("waiting for worker {} to come back or be replaced (ps_worker --id={})", m.id,
                 m.id);
    if (!Pipelined()) return Decision{};
    return Make(Decision::kRestartReplica, reason, ReplicaOf(m.id, stages_));
  }
  if (Decision d = TakeReplicaOut(m.id, reason, job, now); d.kind != Decision::kNone) return d;
  const int live = members_->Count(WORKER, [](const MemberRecord& w) { return w.state != DEAD; });
  if (policy_.on_worker_failure == WorkerFailure::kShrink && job == RUNNING_JOB && live > 0) {
    LeaveOut(m.id);
    spdlog::warn("going on with {} workers", live);
    return Make(Decision::kGoOn, "");
  }
  return Make(Decision::kAbort, "");
}

Decision FailurePolicy::Failed(const MemberRecord& m, JobState job, absl::Time now) {
  const std::string why =
      absl::StrCat(RoleName(m.role), " ", m.id, " failed: ", m.status.message());
  if (m.role == WORKER && !m.declared) {
    // It left before declaring its model (a script's error before its first
    // batch): it never took part, and its place is free for another.
    members_->Get(WORKER, m.id)->Declare(DEAD, why, now);
    return Decision{};
  }
  if (m.role == WORKER) {
    if (Decision d = TakeReplicaOut(m.id, why, job, now); d.kind != Decision::kNone) return d;
  } else if (job == RUNNING_JOB) {
    if (std::optional<Decision> out = OutOfJob(m, now)) return *out;
  }
  return Make(Decision::kAbort, why);
}

Decision FailurePolicy::TakeReplicaOut(int worker, const std::string& why, JobState job,
                                       absl::Time now) {
  if (!Pipelined() || policy_.on_worker_failure != WorkerFailure::kShrink || job != RUNNING_JOB) {
    return Decision{};
  }
  const int replica = ReplicaOf(worker, stages_);
  for (int w = replica * stages_; w < (replica + 1) * stages_; ++w) {
    MemberRecord* m = members_->Get(WORKER, w);
    if (m == nullptr || clocks_->removed(w)) continue;
    LeaveOut(w);
    if (m->state != FINISHED) {
      m->Declare(DEAD, absl::StrCat("replica ", replica, " is out: ", why), now);
    }
  }
  int live = 0;
  for (int w = 0; w < clocks_->num_workers(); w += stages_) live += !clocks_->removed(w);
  if (live == 0)
    return Make(Decision::kAbort, absl::StrCat("every replica is out; the last: ", why));
  spdlog::warn("replica {} is out ({}); going on with {} replicas", replica, why, live);
  return Make(Decision::kGoOn, "");
}

absl::StatusOr<Decision> FailurePolicy::Replace(Role role, int id, const std::string& address,
                                                uint64_t incarnation, JobState job,
                                                absl::Time now) {
  const MemberRecord& old = *members_->Get(role, id);
  if (old.incarnation == incarnation && old.address == address) return Decision{};  // a retry
  if (role == WORKER && job == RUNNING_JOB && !KeepsPlace(WORKER)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", id, " cannot be replaced: the job ",
        policy_.on_worker_failure == WorkerFailure::kShrink ? "goes on without a dead worker"
                                                            : "ends when a worker dies",
        " (the scheduler's --on_worker_failure=wait keeps its place)"));
  }
  if (role == WORKER && old.state == FINISHED) {
    return absl::FailedPreconditionError(absl::StrCat("worker ", id, " has finished"));
  }
  if (role == SERVER && job == RUNNING_JOB && OutOfJob(old, now).has_value()) {
    return absl::FailedPreconditionError(absl::StrCat("server ", id, " is out of the job (",
                                                      moves_->WhyOut(id),
                                                      "): add a server with ps_server --join"));
  }
  const bool was_dead = old.state == DEAD;
  const std::string old_address = old.address;
  if (absl::Status st = members_->Replace(role, id, address, incarnation, now); !st.ok()) return st;
  spdlog::warn("{} {} at {} replaced by a new process at {}", RoleName(role), id, old_address,
               address);
  const std::string reason =
      absl::StrCat(RoleName(role), " ", id, " at ", old_address, " replaced by ", address);
  if (job != RUNNING_JOB) return Decision{};
  // A worker's replacement takes over at its clock: nothing else changes
  // (but its replica's links). A server that died has started its rollback.
  if (role == WORKER) {
    return Pipelined() ? Make(Decision::kRestartReplica, reason, ReplicaOf(id, stages_))
                       : Decision{};
  }
  if (was_dead) return Decision{};
  if (promotions_ != nullptr) {
    const Decision d = ServerLost(*members_->Get(role, id), absl::StrCat("replaced by ", address));
    if (d.kind == Decision::kGoOn) return Decision{};
    if (d.kind != Decision::kAbort) return d;
  }
  if (!checkpoints_) {
    return Make(Decision::kAbort,
                absl::StrCat("server ", id,
                             " was replaced and the job writes no checkpoints (checkpoint_every) "
                             "to restore it from"));
  }
  return Make(Decision::kRollback, reason);
}

std::optional<Decision> FailurePolicy::OutOfJob(const MemberRecord& m, absl::Time now) {
  if (moves_ == nullptr) return std::nullopt;
  const bool abandoned = moves_->ServerLost(m.id, now);
  if (moves_->InJob(m.id)) return std::nullopt;
  spdlog::warn("server {} at {} is out of the job ({}): nothing else follows its loss", m.id,
               m.address, moves_->WhyOut(m.id));
  return abandoned ? Make(Decision::kGoOn, "") : Decision{};
}

Decision FailurePolicy::ServerLost(const MemberRecord& m, const std::string& why) {
  std::string promoted;
  if (promotions_ != nullptr) {
    if (promotions_->Promote(m.id, &promoted)) {
      spdlog::warn("server {} {}: {}; no rollback", m.id, why, promoted);
      return Make(Decision::kGoOn, "");
    }
    spdlog::error("server {} {}: no standby takes over ({})", m.id, why, promoted);
  }
  if (checkpoints_) {
    return Make(Decision::kRollback, absl::StrCat("server ", m.id, " at ", m.address, " ", why,
                                                  promoted.empty() ? "" : "; ", promoted));
  }
  return Make(Decision::kAbort, "");
}

absl::StatusOr<Decision> FailurePolicy::LinksBroke(int worker, int replica) const {
  if (!KeepsPlace(WORKER)) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", worker,
                     "'s pipeline links broke; a replica's pipeline restarts only under "
                     "--on_worker_failure=wait"));
  }
  return Make(Decision::kRestartReplica, absl::StrCat("worker ", worker, "'s pipeline links broke"),
              replica);
}

bool FailurePolicy::MaybeRevive(MemberRecord& m, JobState job, absl::Time now) {
  if (m.state != DEAD || job != RUNNING_JOB || !KeepsPlace(m.role) || !InJob(m) ||
      (m.role == WORKER && clocks_->removed(m.id))) {
    return false;
  }
  spdlog::warn("{} {} at {} is back after it was declared dead; it rejoins", RoleName(m.role), m.id,
               m.address);
  m.state = RUNNING;
  m.status.set_message("came back after it was declared dead");
  m.last_seen = now;
  return true;
}

Decision FailurePolicy::CheckTimeouts(JobState job, const PipelineRestarts& pipelines,
                                      const std::function<bool(int)>& at_gate,
                                      absl::Time now) const {
  const std::string within = absl::FormatDuration(policy_.replacement_timeout);
  if (job == WAITING) return UnfilledBeforeTheStart(within, now);
  if (job != RUNNING_JOB) return Decision{};
  Decision out;
  members_->ForEach([&](const MemberRecord& m) {
    if (out.kind != Decision::kNone || m.state != DEAD || !KeepsPlace(m.role) || !InJob(m)) {
      return;
    }
    const absl::Time dead_since = absl::FromUnixMillis(m.status.declared_dead_unix_ms());
    if (now - dead_since <= policy_.replacement_timeout) return;
    out = Make(Decision::kAbort,
               absl::StrCat(RoleName(m.role), " ", m.id,
                            " died and neither came back nor was replaced within ", within,
                            " (start one with ps_", RoleName(m.role), " --id=", m.id, ")"));
  });
  if (out.kind != Decision::kNone) return out;
  if (std::optional<int> r = pipelines.Overdue(now, policy_.replacement_timeout)) {
    return Make(Decision::kAbort,
                absl::StrCat("replica ", *r, "'s pipeline did not restart within ", within,
                             ": waiting for ",
                             absl::StrJoin(pipelines.Pending(*r, *members_, at_gate), ", ")));
  }
  return Decision{};
}

Decision FailurePolicy::UnfilledBeforeTheStart(const std::string& within, absl::Time now) const {
  Decision out;
  members_->ForEach([&](const MemberRecord& m) {
    if (out.kind != Decision::kNone || m.role != WORKER || m.state != DEAD) return;
    const absl::Time left = absl::FromUnixMillis(m.status.declared_dead_unix_ms());
    if (now - left <= policy_.replacement_timeout) return;
    out = Make(Decision::kAbort,
               absl::StrCat("the job could not start: worker ", m.id, " left before it (",
                            m.status.message(), ") and no worker took its place within ", within));
  });
  return out;
}

void FailurePolicy::LeaveOut(int worker) {
  clocks_->Remove(worker);
  state_.add_dead_workers(worker);
}

absl::Status FailurePolicy::Restore(const FailureState& state) {
  for (int w : state.dead_workers()) {
    if (w < 0 || w >= num_workers_) {
      return absl::InvalidArgumentError(
          absl::StrCat("dead worker ", w, " out of range for the job"));
    }
  }
  if (state.deaths() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("count ", state.deaths(), " out of range for the job"));
  }
  state_ = state;
  return absl::OkStatus();
}

}  // namespace pstrain
