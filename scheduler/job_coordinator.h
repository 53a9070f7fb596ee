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
// While RUNNING_JOB, with checkpoints, a server that dies or is replaced
// starts a rollback: a new generation whose clock is the newest complete
// checkpoint set (bounded by the furthest worker); every server loads it,
// every worker resumes at it, and the gates stay shut until each server
// reports the new generation restored. A dead worker leaves the gate
// (WorkerFailure::kShrink), ends the job (kAbort), or keeps its place until
// it comes back or a replacement takes its rank (kWait).
//
// Pipeline stages: every replica has a link epoch. Under kWait a stage that
// died, was replaced, or whose links broke starts a restart of its replica:
// the epoch moves up, the replica's gate calls are held until every one of
// its stages is live and at the gate, and then they all go back to the
// replica's slowest clock and link anew in the new epoch. A rollback moves
// every replica's epoch up (its stages link anew too).
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
#include "proto/cluster.pb.h"
#include "proto/tensor.pb.h"
#include "scheduler/clock_table.h"
#include "scheduler/membership.h"
#include "scheduler/norm_rounds.h"

namespace pstrain {

enum class WorkerFailure {
  kShrink,  // go on without a dead worker (the others split its share)
  kAbort,   // end the job
  kWait,    // hold the gate until it comes back or a replacement takes its rank
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

// The checkpoint directory, as far as the coordinator needs it.
class CheckpointCatalog {
 public:
  virtual ~CheckpointCatalog() = default;
  // The newest clock <= at_most of which every server of `servers` has a
  // complete checkpoint file; 0 when none.
  virtual int64_t NewestCompleteSet(const std::vector<int>& servers, int64_t at_most) = 0;
};

// A call the coordinator holds until the cluster lets it go; the service
// picks the number.
using Ticket = int64_t;

// A held call's answer.
struct Release {
  Ticket ticket = 0;
  absl::Status status;        // OK: the answer below
  AdvanceClockResponse gate;  // a gate call's
  double sum_squares = 0;     // a norm call's
};

class JobCoordinator {
 public:
  // `job` complete and valid; `catalog` (used only with checkpoints) must
  // outlive this; `trace` (may be empty) receives "clock" and "start"
  // events. `now`: when the scheduler started.
  JobCoordinator(const JobSpec& job, SchedulerPolicy policy, CheckpointCatalog* catalog,
                 std::function<void(const TraceEvent&)> trace, absl::Time now);

  void SetAddress(const std::string& address) { address_ = address; }
  // The servers that hold chunks (and write checkpoints).
  const std::vector<int>& chunk_servers() const { return chunk_servers_; }

  // ---- Events. An error status is the call's answer.
  absl::StatusOr<RegisterResponse> Register(const RegisterRequest& req, absl::Time now);
  absl::StatusOr<HeartbeatResponse> Heartbeat(const HeartbeatRequest& req, absl::Time now);
  // The gate. The answer now (in *resp), or *parked and the answer later as
  // a Release of `ticket`.
  absl::Status AdvanceClock(const AdvanceClockRequest& req, Ticket ticket, absl::Time now,
                            AdvanceClockResponse* resp, bool* parked);
  // A server's BSP norm: the round's total now, or *parked and later.
  absl::Status ReduceNorm(const ReduceNormRequest& req, Ticket ticket, absl::Time now,
                          double* sum_squares, bool* parked);
  // Declares dead the members silent past the heartbeat timeout and ends
  // the job when a kept place was not filled in time.
  void Tick(absl::Time now);
  // This process did not run for `gap` (stopped, swapped out; its liveness
  // loop saw the gap): the members were not silent, the scheduler was deaf,
  // so that time does not count toward their heartbeat timeout.
  void Paused(absl::Duration gap, absl::Time now);
  // Ends the job ABORTED (the scheduler was interrupted).
  void Abort(const std::string& message, absl::Time now);
  // A held call that went away (cancelled): no Release for it.
  void Forget(Ticket ticket);

  // ---- Decisions.
  // Held calls answered since the last call, oldest first.
  std::vector<Release> TakeReleases();
  // A manifest to write (the newest clock every chunk server has written a
  // checkpoint of), at most one at a time until ManifestWritten.
  std::optional<int64_t> TakeManifestToWrite();
  void ManifestWritten(int64_t clock, const absl::Status& status, absl::Time now);

  // An operator's request (psctl): CHECKPOINT asks every server for a
  // checkpoint of a clock a few clocks ahead of the fastest worker (workers
  // carry the request to the servers in their pushes); DRAIN also ends the
  // job at that clock, DONE once the manifest names its checkpoint; STOP
  // ends the job now, ABORTED. The checkpoint's clock, or
  // FAILED_PRECONDITION (no checkpoints configured, the job not running,
  // already draining).
  // SET_CONSISTENCY changes the consistency from such a clock on (a job
  // started under SSP or ASP cannot go to BSP: its servers keep no round
  // sums); INVALID_ARGUMENT for a bad mode or bound.
  absl::StatusOr<int64_t> Control(const ControlRequest& req, absl::Time now);

  // ---- Taking over (a scheduler restarted on its --state_dir).
  // Everything that must outlive this process (scheduler/state_file.h).
  SchedulerState Snapshot() const;
  // A short fingerprint of the state the members act on -- membership and
  // member states, the generation and rollback, the consistency schedule,
  // checkpoint requests, pipeline link epochs, the manifest, the job's end
  // -- but not the clock table: when it changes, the state must be written
  // before anyone hears of the change.
  std::string DurableKey() const;
  // Takes the job over from `state` (of this coordinator's job, made just
  // now): every member has a heartbeat timeout from `now` to be heard again,
  // each worker's next clock report may move its clock up by more than one,
  // and servers may complete a BSP norm round the old scheduler had begun
  // through their heartbeats. INVALID_ARGUMENT when the state does not fit.
  absl::Status TakeOver(const SchedulerState& state, absl::Time now);

  JobState state(std::string* message = nullptr) const;
  // True once the job ended and every member has been told so (or `grace`
  // passed since the end).
  bool MembersToldOfEnd(absl::Time now, absl::Duration grace) const;
  // The cluster's status (the scheduler's own entry without its resident
  // memory, which the service adds).
  ClusterStatus Status(absl::Time now) const;

 private:
  struct Held {
    Ticket ticket;
    bool gate;   // a gate call, else a norm call
    int member;  // worker (gate) or server (norm)
    int64_t clock;
    absl::Time since;
    bool stale;  // a gate of an older generation: answered with the resume clock
  };
  // A pipeline replica's links: their epoch, and the restart under way.
  struct ReplicaLinks {
    int64_t epoch = 0;
    bool restarting = false;
    absl::Time since;  // of the restart under way
  };
  // Calls one member may have held at once (a retrying client leaves some
  // behind until they are cancelled); more are RESOURCE_EXHAUSTED.
  static constexpr int kMaxHeldPerMember = 8;

  absl::Status RoomToHold(bool gate, int member) const;
  bool GateOpen(int64_t clock) const;
  // The first clock no worker can have started when asked now.
  int64_t ClockNotStarted() const;
  absl::StatusOr<int64_t> ChangeConsistency(const ControlRequest& req, absl::Time now);
  void FillGate(int worker, int64_t clock, AdvanceClockResponse* resp);
  // Releases the held calls that may now go, or must fail (the job ended).
  void WakeHeld();
  void EndJob(JobState state, const std::string& message, absl::Time now);
  void Trace(const char* event, int worker, int64_t clock);
  void DeclareDead(MemberRecord& m, absl::Time now);
  // Pipeline stages under shrink: a stage worker that died or failed takes
  // its whole replica out of the gate and the servers' rounds, and the other
  // replicas go on (the job ends when none is left). False when that is not
  // the policy (the caller then acts as without stages).
  bool TakeReplicaOut(int worker, const std::string& why, absl::Time now);
  void CheckReplacementTimeouts(absl::Time now);
  void AddReportedNorm(const NodeStatus& server);
  void CatchUpClock(const NodeStatus& worker);
  // Every live worker FINISHED: DONE.
  void MaybeDone(absl::Time now);
  void BeginRollback(const std::string& reason, absl::Time now);
  void MaybeEndRollback(absl::Time now);
  // The slot a registration takes over (a rank, or a dead member once every
  // id is taken), -1 for a new one, or why it is refused.
  absl::StatusOr<int> SlotFor(const RegisterRequest& req) const;
  absl::Status ReplaceMember(Role role, int id, const RegisterRequest& req, absl::Time now);
  bool KeepsPlace(Role role) const;
  void Revive(MemberRecord& m, absl::Time now);
  absl::Status GateOfOlderGeneration(const AdvanceClockRequest& req, Ticket ticket, absl::Time now,
                                     AdvanceClockResponse* resp, bool* parked);
  void AddWaits(NodeStatus* me) const;
  // ---- Pipeline restarts (kWait with stages; see the class comment).
  bool Pipelined() const { return job_.pipeline_stages() > 1; }
  int ReplicaOfWorker(int worker) const;
  // A gate call that is part of a restart (its links broke, or its epoch
  // is behind): answered, held, or refused. False: an ordinary gate call.
  absl::StatusOr<bool> GateOfRestart(const AdvanceClockRequest& req, Ticket ticket, absl::Time now,
                                     AdvanceClockResponse* resp, bool* parked);
  void BeginRestart(int replica, const std::string& why, absl::Time now);
  // Every stage of the restarting replica live and at the gate: back to
  // its slowest clock, and the held calls answered.
  void MaybeEndRestart(int replica, absl::Time now);
  // The replica's stages that a restart still waits for.
  std::vector<std::string> RestartPending(int replica) const;

  const JobSpec job_;
  const SchedulerPolicy policy_;
  CheckpointCatalog* const catalog_;
  const std::function<void(const TraceEvent&)> trace_;
  std::vector<int> chunk_servers_;  // servers holding chunks
  int64_t total_clocks_;  // the spec's, or less once draining
  const absl::Time start_;
  int64_t takeovers_ = 0;
  absl::Time taken_over_;

  std::string address_;
  Membership members_;
  ClockTable clocks_;
  JobState state_ = WAITING;
  std::string message_;
  std::vector<int32_t> dead_workers_;
  absl::Time ended_at_ = absl::InfiniteFuture();
  NormRounds norms_;
  std::vector<Held> held_;
  std::vector<Release> releases_;

  // Rollbacks: the generation, the clock it started from, whether servers
  // are still restoring it.
  int64_t generation_ = 0;
  int64_t restore_clock_ = 0;
  bool rolling_back_ = false;
  std::vector<Rollback> rollbacks_;
  int64_t deaths_ = 0;  // members declared dead
  int64_t checkpoint_asked_ = 0;  // psctl checkpoint / drain
  ConsistencySchedule schedule_;   // the spec's consistency, then psctl set-consistency's
  bool draining_ = false;
  std::vector<ReplicaLinks> links_;  // per replica, with pipeline stages
  std::vector<PipelineRestart> restarts_;
  google::protobuf::RepeatedPtrField<PipelineStage> stages_;  // the job's plan
  int64_t manifest_clock_ = 0;
  bool manifest_in_flight_ = false;
  bool manifest_error_logged_ = false;
};

}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_JOB_COORDINATOR_H_
