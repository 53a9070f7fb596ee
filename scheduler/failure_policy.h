// The one answer to "a member was lost": declared dead (silent past the
// heartbeat timeout), reported FAILED, replaced by a new process, or (a
// pipeline stage) its links broke -- and to "it came back". While the job
// runs:
//
//   a server out of the job        -> nothing: it holds nothing (a server
//   (PlacementMoves::InJob)           added by a move that its loss, or
//                                      another's, abandoned)
//   a server, with standby copies -> its standbys are promoted (Promotions),
//                                      when they can be; else as below
//   a server, with checkpoints      -> the cluster rolls back (Rollbacks)
//   a server, without               -> the job ends ABORTED
//   a worker under kShrink          -> the job goes on without it (with
//                                      stages: without its whole replica)
//   a worker under kWait            -> its place is kept until it comes back
//                                      or a replacement takes its id (with
//                                      stages: its replica restarts)
//   a worker under kAbort, or FAILED -> the job ends ABORTED (with stages
//                                      under kShrink: its replica is out)
//   a kept place not filled within the replacement timeout, or a replica
//   that did not restart within it   -> the job ends ABORTED
//
// A server lost abandons the move of the placement that needs it first.
// FailurePolicy marks the members (Membership), leaves workers out of the
// gate (ClockTable) and abandons moves (PlacementMoves) itself; what else follows it returns as a
// Decision for JobCoordinator to carry out. No I/O but logs.
//
// Not thread-safe: the coordinator's owner guards it.
#ifndef PSTRAIN_SCHEDULER_FAILURE_POLICY_H_
#define PSTRAIN_SCHEDULER_FAILURE_POLICY_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/cluster.pb.h"
#include "proto/job.pb.h"
#include "proto/scheduler_state.pb.h"
#include "scheduler/clock_table.h"
#include "scheduler/membership.h"
#include "scheduler/pipeline_restarts.h"
#include "scheduler/placement_moves.h"
#include "scheduler/promotions.h"

namespace pstrain {

enum class WorkerFailure {
  kShrink,  // go on without a dead worker (the others split its share)
  kAbort,   // end the job
  kWait,    // hold the gate until it comes back or a replacement takes its id
};

struct SchedulerPolicy {
  WorkerFailure on_worker_failure = WorkerFailure::kShrink;
  // The clock the job starts from (the manifest's, when resuming).
  int64_t start_clock = 0;
  // A dead member whose place is kept (a server of a job with checkpoints,
  // a worker under kWait) ends the job when it is neither back nor
  // replaced after this long.
  absl::Duration replacement_timeout = absl::Minutes(1);
  // A member silent for longer than this is declared dead.
  absl::Duration heartbeat_timeout = absl::Seconds(5);
};

// "shrink", "abort" or "wait" (the flag's and the state file's spelling).
const char* WorkerFailureName(WorkerFailure f);

// What follows a loss, for the coordinator to carry out.
struct Decision {
  enum Kind {
    kNone,            // nothing (a retry, or the place is kept and waited for)
    kGoOn,            // workers were left out: held gates may open, the job may be done
    kRollback,        // the cluster rolls back; `why` is the rollback's reason
    kRestartReplica,  // `replica`'s pipeline restarts; `why` is the restart's reason
    kAbort,           // the job ends ABORTED; `why` is its message
  };
  Kind kind = kNone;
  std::string why;
  int replica = -1;
};

class FailurePolicy {
 public:
  // `members`, `clocks`, `promotions` and `moves` (the coordinator's;
  // null: none) must outlive this.
  FailurePolicy(const JobSpec& job, const SchedulerPolicy& policy, Membership* members,
                ClockTable* clocks, Promotions* promotions = nullptr,
                PlacementMoves* moves = nullptr);

  // Whether a dead member of `role` keeps its place (it may come back or be
  // replaced): a server of a job with checkpoints or standby copies, a
  // worker under kWait.
  bool KeepsPlace(Role role) const;
  // Whether `m` is still in the job but silent past the heartbeat timeout.
  bool Silent(const MemberRecord& m, absl::Time now) const;

  // `m` is silent past the heartbeat timeout (the job is in `job`): DEAD.
  Decision DeclareDead(MemberRecord& m, JobState job, absl::Time now);
  // `m` reported FAILED. A worker that had not declared its model
  // (RegisterRequest.declare_later) is marked DEAD, its place free for
  // another, and nothing else happens.
  Decision Failed(const MemberRecord& m, JobState job, absl::Time now);
  // A new process (`address`, `incarnation`) registers in (role, id)'s
  // place. FAILED_PRECONDITION when the place is not kept (or the worker
  // finished); Membership::Replace's errors.
  absl::StatusOr<Decision> Replace(Role role, int id, const std::string& address,
                                   uint64_t incarnation, JobState job, absl::Time now);
  // `worker`'s pipeline links broke: its replica restarts, under kWait only
  // (FAILED_PRECONDITION otherwise).
  absl::StatusOr<Decision> LinksBroke(int worker, int replica) const;
  // `m` was heard from: a DEAD member whose place is kept rejoins. True
  // when it did (held calls may go on).
  bool MaybeRevive(MemberRecord& m, JobState job, absl::Time now);
  // A kept place not filled in time, a replica that did not restart in
  // time (`at_gate`: whether a worker is held at the gate), or before the
  // start (WAITING) a worker's place left (it failed before declaring its
  // model) and not taken again within the replacement timeout: the job can
  // never start. kAbort, saying which.
  Decision CheckTimeouts(JobState job, const PipelineRestarts& pipelines,
                         const std::function<bool(int worker)>& at_gate, absl::Time now) const;
  // Leaves `worker` out of the gate for good (the servers hear of it in
  // dead_workers).
  void LeaveOut(int worker);

  // The workers the job went on without, in order.
  const google::protobuf::RepeatedField<int32_t>& dead_workers() const {
    return state_.dead_workers();
  }
  int64_t deaths() const { return state_.deaths(); }

  // Its part of the cluster's status: the deaths.
  void AddStatus(ClusterStatus* out) const { out->set_deaths(deaths()); }

  // The durable part (SchedulerState.failures).
  const FailureState& Snapshot() const { return state_; }
  // INVALID_ARGUMENT (and nothing changed) for a worker outside the job or
  // a negative count.
  absl::Status Restore(const FailureState& state);

 private:
  bool Pipelined() const { return stages_ > 1; }
  // Under kShrink with stages, `worker`'s replica leaves the job; kNone
  // when that is not the policy.
  Decision TakeReplicaOut(int worker, const std::string& why, JobState job, absl::Time now);
  Decision WorkerDied(const MemberRecord& m, const std::string& why, JobState job, absl::Time now);
  // A server lost while the job runs: its standbys promoted (kGoOn), or a
  // rollback, or kAbort without a message.
  Decision ServerLost(const MemberRecord& m, const std::string& why);
  // A server lost while the job runs abandons the move that needs it.
  // One out of the job then held nothing: nothing follows (kGoOn when a
  // move was abandoned: the gate holds no clock for it now). nullopt: it
  // is in the job.
  std::optional<Decision> OutOfJob(const MemberRecord& m, absl::Time now);
  bool InJob(const MemberRecord& m) const {
    return m.role != SERVER || moves_ == nullptr || moves_->InJob(m.id);
  }
  // CheckTimeouts' answer before the start (`within`: the timeout, written).
  Decision UnfilledBeforeTheStart(const std::string& within, absl::Time now) const;

  const SchedulerPolicy policy_;
  const bool checkpoints_;
  const int stages_;
  const int num_workers_;
  Membership* const members_;
  ClockTable* const clocks_;
  Promotions* const promotions_;
  PlacementMoves* const moves_;
  FailureState state_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_FAILURE_POLICY_H_
