// The job's state machine, as a plain class: no gRPC, no file system, no
// clock of its own. Events come in (a registration, a heartbeat, a gate
// call, a norm report, a tick of time), each with the time it happened;
// decisions go out as values (an answer, a call parked under a ticket,
// calls released later, a manifest to write). SchedulerService adapts it to
// gRPC; tests drive it with a fake clock and a fake checkpoint catalog.
//
//   WAITING --all members registered--> RUNNING_JOB --all workers FINISHED--> DONE
//   any state --a member reports FAILED, or dies where the job cannot go on--> ABORTED
//
// It keeps the job's state (WAITING .. DONE) and dispatches each event to
// the parts that own a concern, each a plain class with its own test:
//
//   membership.h         who is in the job, each member's state and report
//   failure_policy.h     what a member's death, failure, replacement or
//                        return does (shrink, abort, wait, roll back)
//   gate.h               the gate and the BSP norm rounds: which held call
//                        goes when, and what it is told
//     clock_table.h      the workers' clocks and the staleness bound
//     held_calls.h       the calls held and their answers
//     norm_rounds.h      BSP clipping's norm rounds
//   rollbacks.h          generations, rollbacks to a checkpoint, the manifest
//   pipeline_restarts.h  pipeline replicas' link generations and restarts
//   operator_control.h   psctl checkpoint, drain and set-consistency
//
// Each part owns its slice of the durable state (SchedulerState in
// proto/scheduler_state.proto): Snapshot assembles it from theirs, TakeOver hands
// it back, DurableKey is derived from its bytes.
//
// Not thread-safe: the service guards it.
#ifndef PSTRAIN_SCHEDULER_JOB_COORDINATOR_H_
#define PSTRAIN_SCHEDULER_JOB_COORDINATOR_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/job_spec.h"
#include "common/log_limit.h"
#include "proto/cluster.pb.h"
#include "proto/scheduler_state.pb.h"
#include "proto/tensor.pb.h"
#include "scheduler/clock_table.h"
#include "scheduler/failure_policy.h"
#include "scheduler/gate.h"
#include "scheduler/held_calls.h"
#include "scheduler/membership.h"
#include "scheduler/operator_control.h"
#include "scheduler/pipeline_restarts.h"
#include "scheduler/placement_moves.h"
#include "scheduler/promotions.h"
#include "scheduler/rollbacks.h"

namespace pstrain {

class JobCoordinator {
 public:
  // `job` complete and valid; `catalog` (used only with checkpoints) must
  // outlive this; `trace` (may be empty) receives "clock", "start" and
  // "restart" events. `now`: when the scheduler started.
  JobCoordinator(const JobSpec& job, SchedulerPolicy policy, CheckpointCatalog* catalog,
                 std::function<void(const TraceEvent&)> trace, absl::Time now);

  void SetAddress(const std::string& address) { address_ = address; }
  // The servers that hold chunks (and write checkpoints).
  const std::vector<int>& chunk_servers() const { return rollbacks_.chunk_servers(); }
  // The job as the members receive it (an EXTERNAL model's parameters once
  // the first worker declared them).
  const JobSpec& job() const { return job_; }

  // ---- Events. An error status is the call's answer.
  absl::StatusOr<RegisterResponse> Register(const RegisterRequest& req, absl::Time now);
  // A registration that names the id of a member that may be live (not
  // declared dead, not ended; not at that member's own address -- its
  // retry, or a restart in place -- not asked to replace_live): that
  // member's address, which the service asks
  // whether a process still answers there -- a member killed a moment ago
  // has not been declared dead yet, and its replacement takes its place at
  // once; one that answers keeps it (RefuseLive). nullopt: Register now.
  std::optional<std::string> LiveHolder(const RegisterRequest& req) const;
  // The refusal of `req`, whose id's member answered at its address:
  // ALREADY_EXISTS naming it and --replace_live.
  absl::Status RefuseLive(const RegisterRequest& req, absl::Time now);
  absl::StatusOr<HeartbeatResponse> Heartbeat(const HeartbeatRequest& req, absl::Time now);
  // The gate. The answer now (in *resp), or *parked and the answer later as
  // a Release of `ticket`.
  absl::Status AdvanceClock(const AdvanceClockRequest& req, Ticket ticket, absl::Time now,
                            AdvanceClockResponse* resp, bool* parked);
  // A server's BSP norm: the round's total now, or *parked and later.
  absl::Status ReduceNorm(const ReduceNormRequest& req, Ticket ticket, absl::Time now,
                          double* sum_squares, bool* parked);
  // Declares dead the members silent past the heartbeat timeout (after
  // the job's end too, for its final status) and ends the job when a kept
  // place was not filled in time, or a worker's place left before the
  // start was not taken again in time.
  void Tick(absl::Time now);
  // This process did not run for `gap` (stopped, swapped out; its liveness
  // loop saw the gap): the members were not silent, the scheduler was deaf,
  // so that time does not count toward their heartbeat timeout.
  void Paused(absl::Duration gap, absl::Time now);
  // Ends the job ABORTED (the scheduler was interrupted).
  void Abort(const std::string& message, absl::Time now);
  // A held call that went away (cancelled): no Release for it.
  void Forget(Ticket ticket) { gate_.Forget(ticket); }

  // ---- Decisions.
  // Held calls answered since the last call, oldest first.
  std::vector<Release> TakeReleases() { return gate_.TakeReleases(); }
  // A manifest to write (the newest clock every chunk server has written a
  // checkpoint of), at most one at a time until ManifestWritten.
  std::optional<int64_t> TakeManifestToWrite() { return rollbacks_.TakeManifestToWrite(members_); }
  void ManifestWritten(int64_t clock, const absl::Status& status, absl::Time now);

  // An operator's request (psctl): STOP ends the job now, ABORTED, at the
  // slowest worker's clock; CHECKPOINT, DRAIN and SET_CONSISTENCY are
  // OperatorControl::Ask's. The clock it takes effect at, or
  // FAILED_PRECONDITION (the job not running), UNAVAILABLE (a worker's
  // clock unknown since a takeover) or Ask's errors.
  absl::StatusOr<int64_t> Control(const ControlRequest& req, absl::Time now);

  // ---- Taking over (a scheduler restarted on its --state_dir).
  // Everything that must outlive this process (scheduler/state_file.h):
  // the parts' durable state and the coordinator's own.
  SchedulerState Snapshot() const;
  // The snapshot's bytes without the fields the members tell a scheduler
  // again (resent_by_members: the clock table, the members' last reports):
  // when it changes, the state must be written before anyone hears of the
  // change.
  std::string DurableKey() const;
  // Takes the job over from `state` (of this coordinator's job, made just
  // now): every member has a heartbeat timeout from `now` to be heard again,
  // each worker's next clock report may move its clock up by more than one,
  // and servers may complete a BSP norm round the old scheduler had begun
  // through their heartbeats. INVALID_ARGUMENT when the state does not fit
  // the job (this coordinator is then of no use: start a new one).
  absl::Status TakeOver(const SchedulerState& state, absl::Time now);

  JobState state(std::string* message = nullptr) const;
  // True once the job ended and every member has told its last state --
  // FINISHED or FAILED, in its final report -- or was declared DEAD, or
  // (`grace` passed since the end) is still heard from: what the final
  // status shows is then each member's real end. A member that went
  // silent holds it until it is declared dead (Tick goes on declaring
  // silent members dead after the end), at most a heartbeat timeout.
  bool MembersEnded(absl::Time now, absl::Duration grace) const;
  // The cluster's status (the scheduler's own entry without its resident
  // memory, which the service adds).
  ClusterStatus Status(absl::Time now) const;

 private:
  // Logs a refused registration: anyone who reaches the port can make
  // them, so at most 5 lines a minute (common/log_limit.h).
  void LogRefusal(const RegisterRequest& req, const absl::Status& why, absl::Time now);
  bool Ended() const { return phase_.Ended(); }
  bool Running() const { return phase_.Running(); }
  // Carries out what FailurePolicy decided.
  void Enact(const Decision& d, absl::Time now);
  // A DEAD member heard from again: held calls may go, its replica restart.
  void Revived(const MemberRecord& m, absl::Time now);
  HeartbeatResponse HeartbeatAnswer(const MemberRecord& m) const;
  void BeginRollback(const std::string& reason, absl::Time now, bool redo = false);
  // Worker `worker`, a replacement, cannot redo `clock` as its predecessor
  // made it (AdvanceClockRequest.redo_inexact): with checkpoints the
  // cluster rolls back to the last one, else the redo goes on as read.
  void RollBackForARedo(int worker, int64_t clock, absl::Time now);
  void MaybeEndRollback(absl::Time now);
  std::function<bool(int)> AtGate() const;
  // Every live worker FINISHED: DONE.
  void MaybeDone(absl::Time now);
  void EndJob(JobState state, const std::string& message, absl::Time now);
  void AddWaits(MemberStatus* me) const;

  // ---- Moves (scheduler/job_coordinator_moves.cc).
  // A server added to the running job (RegisterRequest.join): a move that
  // switches at a checkpoint asked for it, the gate held there; a retry
  // of the same process gets the first answer again. A refusal is logged.
  absl::StatusOr<RegisterResponse> Join(const RegisterRequest& req, absl::Time now);
  absl::StatusOr<RegisterResponse> StartJoin(const RegisterRequest& req, absl::Time now);
  RegisterResponse JoinAnswer(int id) const;
  // psctl drain-server (ControlAction MOVE, DRAIN_SERVER): a move that
  // switches at a clock a few ahead, the gate held there; the switch
  // clock. NOT_FOUND for a server never registered; PlacementMoves::Ask's
  // refusals.
  absl::StatusOr<int64_t> Drain(const ControlRequest& req, absl::Time now);
  // What the job is doing, for a move asked for now (the fastest worker's
  // clock in *fastest).
  PlacementMoves::Context MoveContext(int64_t* fastest) const;
  // The move under way switches once every server it gives chunks or rows
  // holds its handover (HandedOver): a new generation from the switch
  // clock under the move's placement.
  void MaybeSwitch(absl::Time now);
  // The servers the move under way gives chunks or rows that do not hold
  // their handover yet (their Status names another move, or they are
  // gone); empty when every one does, or no move is under way.
  std::vector<int> AwaitedHandovers() const;
  // Why a server cannot take its handover of the move under way (empty:
  // none says so): the move is abandoned.
  std::string HandoverError() const;
  // A rollback begins: the move under way, if any, is abandoned.
  void AbandonMove(const std::string& why, absl::Time now);
  // The gate, the rollbacks and the norm rounds follow the placement in
  // force and the move under way (after a switch, and a takeover).
  void Placed();
  // The placement in force, where members must be told it (version > 1).
  void AddPlacement(Placement* out) const;
  // A server's news of the placement: the one in force when its Status
  // names another version, and why it must leave when it is out of the job.
  void AddPlacementNews(const MemberRecord& server, HeartbeatResponse* out) const;
  // A server's news of the move under way (MoveNews).
  void AddMoveNews(HeartbeatResponse* out) const;
  // The servers the move under way waits for, and its bytes moved.
  void AddMoveWaits(ClusterStatus* out) const;
  // Whether a server is in the job (PlacementMoves::InJob).
  std::function<bool(int)> ServersInJob() const {
    return [this](int server) { return moves_.InJob(server); };
  }

  // The job as the members receive it: an EXTERNAL model's parameters
  // are the first worker's (Register).
  JobSpec job_;
  const SchedulerPolicy policy_;
  const absl::Time start_;
  const google::protobuf::RepeatedPtrField<PipelineStage> stages_;  // the job's plan
  std::string address_;

  // The job's own state.
  JobPhase phase_;
  absl::Time ended_at_ = absl::InfiniteFuture();
  LogLimit refusals_log_;
  int64_t start_clock_;  // the policy's, or the state's taken over
  int64_t takeovers_ = 0;
  absl::Time taken_over_;

  // Its parts (the header comment says which is what); the gate and the
  // failure policy act on the others.
  Membership members_;
  ClockTable clocks_;
  Rollbacks rollbacks_;
  PipelineRestarts pipelines_;
  OperatorControl control_;
  Gate gate_;
  Promotions promotions_;  // before failures_, which uses it
  PlacementMoves moves_;   // and it
  FailurePolicy failures_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_JOB_COORDINATOR_H_
