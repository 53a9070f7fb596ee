// JobCoordinator's durable state: the snapshot its owner writes to the
// state file, and a takeover from one. See scheduler/job_coordinator.h.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "scheduler/durable_key.h"
#include "scheduler/job_coordinator.h"

namespace pstrain {

SchedulerState JobCoordinator::Snapshot() const {
  SchedulerState s;
  s.set_format("pstrain scheduler state");
  *s.mutable_job() = job_;
  s.set_job_state(phase_.state);
  s.set_message(phase_.message);
  s.set_start_clock(start_clock_);
  s.set_on_worker_failure(WorkerFailureName(policy_.on_worker_failure));
  s.set_scheduler_takeovers(takeovers_);
  s.set_taken_over_unix_ms(takeovers_ > 0 ? absl::ToUnixMillis(taken_over_) : 0);
  *s.mutable_members() = members_.Snapshot();
  *s.mutable_clocks() = clocks_.Snapshot();
  *s.mutable_failures() = failures_.Snapshot();
  *s.mutable_rollbacks() = rollbacks_.Snapshot();
  *s.mutable_pipelines() = pipelines_.Snapshot();
  *s.mutable_control() = control_.Snapshot();
  *s.mutable_promotions() = promotions_.Snapshot();
  *s.mutable_moves() = moves_.Snapshot();
  return s;
}

std::string JobCoordinator::DurableKey() const { return DurableKeyOf(Snapshot()); }

absl::Status JobCoordinator::TakeOver(const SchedulerState& s, absl::Time now) {
  // The values of a state file in range for its job (a file edited by hand
  // or damaged must not steer the job); each part checks its own.
  const int64_t clocks = TotalClocks(job_);
  if (s.start_clock() < 0 || s.start_clock() > clocks) {
    return absl::InvalidArgumentError(
        absl::StrCat("clock ", s.start_clock(), " out of range for the job"));
  }
  if (s.scheduler_takeovers() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("count ", s.scheduler_takeovers(), " out of range for the job"));
  }
  RETURN_IF_ERROR(control_.Restore(s.control(), clocks));
  RETURN_IF_ERROR(clocks_.Restore(s.clocks(), control_.total_clocks()));
  RETURN_IF_ERROR(members_.Restore(s.members(), now));
  RETURN_IF_ERROR(failures_.Restore(s.failures()));
  RETURN_IF_ERROR(rollbacks_.Restore(s.rollbacks(), clocks));
  RETURN_IF_ERROR(pipelines_.Restore(s.pipelines()));
  if (s.has_promotions()) RETURN_IF_ERROR(promotions_.Restore(s.promotions()));
  if (s.has_moves()) {
    RETURN_IF_ERROR(moves_.Restore(s.moves()));
    Placed();
  }
  phase_.state = s.job_state();
  phase_.message = s.message();
  if (Ended()) ended_at_ = now;
  start_clock_ = s.start_clock();
  gate_.TakenOver();
  takeovers_ = s.scheduler_takeovers() + 1;
  taken_over_ = now;
  spdlog::warn(
      "took the job over from the state file: {}, generation {}, clocks {}..{} as last written; "
      "{} servers and {} workers to hear from again",
      JobState_Name(phase_.state), rollbacks_.generation(), clocks_.SlowestClock(),
      *std::max_element(s.clocks().clocks().begin(), s.clocks().clocks().end()),
      members_.registered(SERVER), members_.registered(WORKER));
  return absl::OkStatus();
}

}  // namespace pstrain
