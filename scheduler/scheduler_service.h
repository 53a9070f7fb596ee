// The scheduler's gRPC service: registration, heartbeats, the gate and the
// cluster's status. Holds the job's state machine:
//   WAITING --all members registered--> RUNNING_JOB --all workers FINISHED--> DONE
//   any state --a member reports FAILED or goes silent (DEAD)--> ABORTED
// and, while RUNNING_JOB with checkpoints, the rollbacks: a server that dies
// or is replaced starts a new generation; every server loads the newest complete
// checkpoint set, every worker resumes at its clock, and the gates stay
// shut until each server reports the new generation restored.
#ifndef PSTRAIN_SCHEDULER_SCHEDULER_SERVICE_H_
#define PSTRAIN_SCHEDULER_SCHEDULER_SERVICE_H_

#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/parked_call.h"
#include "common/trace.h"
#include "proto/cluster.grpc.pb.h"
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
};

class SchedulerService final : public Scheduler::CallbackService {
 public:
  // `job` must be complete and valid. `trace` may be null.
  SchedulerService(const JobSpec& job, TraceWriter* trace, SchedulerPolicy policy = {});

  void SetAddress(const std::string& address);
  // Ends the job as ABORTED (e.g. the scheduler was interrupted).
  void Abort(const std::string& message);
  // Declares DEAD every member not yet finished, failed or dead whose last
  // registration or heartbeat is older than `timeout`, with when and why in
  // its status. A dead worker leaves the gate and the servers' rounds (they
  // hear of it with their heartbeats) when shrinking, and the job goes on
  // with the others; a dead server starts a rollback when the job writes
  // checkpoints (and ends it when no replacement comes within the restart
  // timeout); a dead server without checkpoints, the last worker, or any
  // worker without shrinking ends the job ABORTED, so nobody waits on the
  // dead member.
  void CheckLiveness(absl::Time now, absl::Duration timeout);
  JobState job_state(std::string* message = nullptr) const;
  // True once the job ended and every member has been told so (or
  // `grace` passed since the end).
  bool MembersToldOfEnd(absl::Duration grace) const;
  ClusterStatus GetStatus() const;

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* ctx, const RegisterRequest* req,
                                     RegisterResponse* resp) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx, const HeartbeatRequest* req,
                                      HeartbeatResponse* resp) override;
  grpc::ServerUnaryReactor* AdvanceClock(grpc::CallbackServerContext* ctx,
                                         const AdvanceClockRequest* req,
                                         AdvanceClockResponse* resp) override;
  grpc::ServerUnaryReactor* ReduceNorm(grpc::CallbackServerContext* ctx,
                                       const ReduceNormRequest* req,
                                       ReduceNormResponse* resp) override;
  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* ctx, const StatusRequest* req,
                                   ClusterStatus* resp) override;

 private:
  struct PendingGate {
    int worker;
    int64_t clock;
    AdvanceClockResponse* response;
    absl::Time since;
    bool stale;  // of an older generation: answered with the resume clock once restored
  };

  struct PendingNorm {
    int64_t clock;
    ReduceNormResponse* response;
    int server;
    absl::Time since;
  };
  // Calls one member may have waiting at once (a retrying client leaves
  // some behind until they are cancelled); more are RESOURCE_EXHAUSTED.
  static constexpr int kMaxParkedPerMember = 8;
  grpc::Status RoomToPark(int worker) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool GateOpen(int64_t clock) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers parked norm calls whose round is complete (or fails them: job ended).
  void WakeNorms() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FillGate(int worker, int64_t clock, AdvanceClockResponse* resp)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers parked gate calls that may now go (or must fail: job aborted).
  void WakeGates() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndJob(JobState state, const std::string& message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Trace(const char* event, int worker, int64_t clock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Every live worker FINISHED (and none left running): DONE.
  void MaybeDone() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts generation + 1: back to the newest complete checkpoint set.
  void BeginRollback(const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the rollback once every server reports the generation restored.
  void MaybeEndRollback() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the manifest when every server has written a newer checkpoint.
  void MaybeWriteManifest() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A registration in place of member (role, id): a replacement of a
  // failed one, or a restart on purpose.
  grpc::Status ReplaceMember(Role role, int id, const RegisterRequest& req)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the job keeps a dead member's place for it to come back or be
  // replaced: a server when the job writes checkpoints, a worker under
  // WorkerFailure::kWait.
  bool KeepsPlace(Role role) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A dead member whose place is kept is heard from again (a network cut
  // healed): it rejoins.
  void Revive(MemberRecord& m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const JobSpec job_;
  const SchedulerPolicy policy_;
  std::vector<int> chunk_servers_;  // servers holding chunks
  const int64_t total_clocks_;
  const absl::Time start_;
  TraceWriter* trace_;

  mutable absl::Mutex mu_;
  std::string address_ ABSL_GUARDED_BY(mu_);
  Membership members_ ABSL_GUARDED_BY(mu_);
  ClockTable clocks_ ABSL_GUARDED_BY(mu_);
  JobState state_ ABSL_GUARDED_BY(mu_) = WAITING;
  std::string message_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> dead_workers_ ABSL_GUARDED_BY(mu_);
  absl::Time ended_at_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  std::vector<Parked<PendingGate>> parked_ ABSL_GUARDED_BY(mu_);
  NormRounds norms_ ABSL_GUARDED_BY(mu_);
  std::vector<Parked<PendingNorm>> parked_norms_ ABSL_GUARDED_BY(mu_);

  // Rollbacks: the generation, the clock it started from, whether servers are
  // still restoring it.
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t restore_clock_ ABSL_GUARDED_BY(mu_) = 0;
  bool rolling_back_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Rollback> rollbacks_ ABSL_GUARDED_BY(mu_);
  int64_t manifest_clock_ ABSL_GUARDED_BY(mu_) = 0;
  bool manifest_error_logged_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_SCHEDULER_SERVICE_H_
