#include "scheduler/operator_control.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/job_consistency.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

// The first clock no worker can have started when asked now: a worker
// learns of a request in the gate's answer to its report of the clock
// after the fastest's (one clock later under SSP and ASP, whose workers
// take that answer lazily), before it starts the clock after it.
int64_t ClockNotStarted(int64_t fastest) { return fastest + 3; }

}  // namespace

OperatorControl::OperatorControl(const JobSpec& job) : job_(job), schedule_(job) {
  state_.set_total_clocks(TotalClocks(job));
  // The job's planned changes come first (the schedule has them already).
  *state_.mutable_consistency_changes() = job.consistency_plan();
}

absl::StatusOr<int64_t> OperatorControl::Ask(const ControlRequest& req, int64_t fastest,
                                             absl::Time now) {
  if (req.action() == SET_CONSISTENCY) return ChangeConsistency(req, fastest, now);
  if (req.action() != CHECKPOINT && req.action() != DRAIN) {
    return absl::InvalidArgumentError("expected CHECKPOINT, DRAIN, STOP or SET_CONSISTENCY");
  }
  return AskCheckpoint(req.action(), fastest);
}

int64_t OperatorControl::CheckpointClockFor(int64_t fastest) const {
  return std::max(checkpoint_asked(), std::min(total_clocks(), ClockNotStarted(fastest)));
}

absl::StatusOr<int64_t> OperatorControl::AskCheckpoint(ControlAction action, int64_t fastest) {
  if (job_.checkpoint_every() <= 0 || job_.checkpoint_dir().empty()) {
    return absl::FailedPreconditionError(
        "the job writes no checkpoints: start it with --checkpoint_dir and --checkpoint_every");
  }
  if (draining()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the job is already draining to clock ", total_clocks()));
  }
  const int64_t clock = std::min(total_clocks(), ClockNotStarted(fastest));
  state_.set_checkpoint_asked(std::max(checkpoint_asked(), clock));
  if (action == DRAIN) {
    state_.set_draining(true);
    state_.set_total_clocks(clock);
  }
  spdlog::info("{}: a checkpoint of clock {} asked for{}", ControlAction_Name(action), clock,
               action == DRAIN ? "; the job ends there" : "");
  return clock;
}

absl::StatusOr<int64_t> OperatorControl::ChangeConsistency(const ControlRequest& req,
                                                           int64_t fastest, absl::Time now) {
  const Consistency mode = req.consistency();
  RETURN_IF_ERROR(CheckConsistencyChange(mode, req.staleness()));
  if (mode == BSP && job_.consistency() != BSP) {
    return absl::FailedPreconditionError(
        "a job started under SSP or ASP cannot go to BSP: its servers keep no round sums "
        "(start it under BSP to switch freely)");
  }
  if (ConsistencyIsFixed(job_)) {
    return absl::FailedPreconditionError(
        "pipelined jobs and BSP jobs with clip_norm keep the consistency they started with");
  }
  const int64_t clock = ClockNotStarted(fastest);
  if (clock >= total_clocks()) {
    return absl::FailedPreconditionError("the job ends before a change could take effect");
  }
  const auto& changes = state_.consistency_changes();
  if (!changes.empty() && changes.rbegin()->clock() >= clock) {
    return absl::FailedPreconditionError(absl::StrCat(
        "a change at clock ", changes.rbegin()->clock(), " is pending; try again in a few clocks"));
  }
  ConsistencyChange* change = state_.add_consistency_changes();
  change->set_clock(clock);
  change->set_consistency(mode);
  change->set_staleness(req.staleness());
  change->set_unix_ms(absl::ToUnixMillis(now));
  schedule_.Set({changes.begin(), changes.end()});
  spdlog::info("consistency: {} (staleness {}) from clock {} on", Consistency_Name(mode),
               req.staleness(), clock);
  return clock;
}

void OperatorControl::AddStatus(ClusterStatus* out) const {
  out->set_consistency(schedule_.Latest().consistency());
  out->set_staleness(schedule_.Latest().staleness());
  *out->mutable_consistency_changes() = state_.consistency_changes();
  out->set_total_clocks(total_clocks());
  out->set_checkpoint_asked(checkpoint_asked());
  out->set_draining(draining());
}

absl::Status OperatorControl::Restore(const ControlState& state, int64_t max_clock) {
  auto bad = [](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(what, " out of range for the job"));
  };
  if (state.total_clocks() < 0 || state.total_clocks() > max_clock) {
    return bad(absl::StrCat("total_clocks ", state.total_clocks()));
  }
  // (A checkpoint asked for may name a clock past the end: asked near it.)
  if (state.checkpoint_asked() < 0) return bad(absl::StrCat("count ", state.checkpoint_asked()));
  for (const ConsistencyChange& c : state.consistency_changes()) {
    if (c.clock() < 0) return bad(absl::StrCat("consistency change at clock ", c.clock()));
  }
  state_ = state;
  schedule_.Set({state_.consistency_changes().begin(), state_.consistency_changes().end()});
  return absl::OkStatus();
}

}  // namespace pstrain
