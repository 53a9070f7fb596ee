// An operator's requests of a running job (psctl), but STOP, which
// JobCoordinator answers by ending the job: CHECKPOINT asks every server
// for a checkpoint of a clock a few clocks ahead of the fastest worker
// (workers carry the request to the servers in their pushes); DRAIN also
// ends the job at that clock (DONE once the manifest names its
// checkpoint); SET_CONSISTENCY changes the consistency from such a clock
// on. Keeps what they changed: the clock asked for, the job's end, the
// consistency schedule. No I/O but logs.
//
// Not thread-safe: the coordinator's owner guards it.
#ifndef PSTRAIN_SCHEDULER_OPERATOR_CONTROL_H_
#define PSTRAIN_SCHEDULER_OPERATOR_CONTROL_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/job_spec.h"
#include "proto/cluster.pb.h"
#include "proto/scheduler_state.pb.h"

namespace pstrain {

class OperatorControl {
 public:
  // `job` complete and valid.
  explicit OperatorControl(const JobSpec& job);

  // The clocks the job trains: the spec's, or fewer once draining.
  int64_t total_clocks() const { return state_.total_clocks(); }
  bool draining() const { return state_.draining(); }
  // The clock of the checkpoint asked for outside the schedule (0: none).
  int64_t checkpoint_asked() const { return state_.checkpoint_asked(); }
  // The spec's consistency, then set-consistency's changes.
  const ConsistencySchedule& schedule() const { return schedule_; }

  // CHECKPOINT, DRAIN or SET_CONSISTENCY, `fastest` being the fastest
  // worker's clock: the clock it takes effect at. FAILED_PRECONDITION for
  // a checkpoint without checkpoints configured, a second drain, or a
  // change that cannot be made (a job started under SSP or ASP cannot go
  // to BSP: its servers keep no round sums); INVALID_ARGUMENT for another
  // action, a bad mode or bound.
  absl::StatusOr<int64_t> Ask(const ControlRequest& req, int64_t fastest, absl::Time now);

  // The clock a checkpoint asked for now would be of, `fastest` being the
  // fastest worker's clock (Ask's CHECKPOINT; the one asked already when it
  // is later).
  int64_t CheckpointClockFor(int64_t fastest) const;

  // Its part of the cluster's status: the consistency and its changes,
  // the clocks, the checkpoint asked for, draining.
  void AddStatus(ClusterStatus* out) const;

  // The durable part (SchedulerState.control).
  const ControlState& Snapshot() const { return state_; }
  // INVALID_ARGUMENT (and nothing changed) when the clocks are outside
  // [0, max_clock] or negative (a change's, the checkpoint asked for).
  absl::Status Restore(const ControlState& state, int64_t max_clock);

 private:
  absl::StatusOr<int64_t> AskCheckpoint(ControlAction action, int64_t fastest);
  absl::StatusOr<int64_t> ChangeConsistency(const ControlRequest& req, int64_t fastest,
                                            absl::Time now);

  const JobSpec job_;
  ControlState state_;
  ConsistencySchedule schedule_;  // of state_'s changes
};

}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_OPERATOR_CONTROL_H_
