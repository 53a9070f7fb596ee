// The scheduler's gRPC service: authentication, request translation and
// one parking lot for the calls the job holds (the gate, norm rounds). The
// job's rules are JobCoordinator's (scheduler/job_coordinator.h); this
// file only feeds it events with the time, answers what it decides, and
// writes the manifest it asks for outside the lock.
#ifndef PSTRAIN_SCHEDULER_SCHEDULER_SERVICE_H_
#define PSTRAIN_SCHEDULER_SCHEDULER_SERVICE_H_

#include <map>
#include <optional>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/parked_call.h"
#include "common/trace.h"
#include "proto/cluster.grpc.pb.h"
#include "scheduler/job_coordinator.h"
#include "scheduler/member_probe.h"

namespace pstrain {

// The job's checkpoint directory (scheduler/manifest.h): a set is
// complete with every server's chunks' file and its file of every table.
class DirectoryCatalog : public CheckpointCatalog {
 public:
  DirectoryCatalog(std::string dir, std::vector<std::string> tables)
      : dir_(std::move(dir)), tables_(std::move(tables)) {}
  int64_t NewestCompleteSet(const std::vector<int>& servers, int64_t at_most) override;

 private:
  const std::string dir_;
  const std::vector<std::string> tables_;
};

// Status is a raw method: bytes that are not a StatusRequest get
// INVALID_ARGUMENT (gRPC's own parsing would answer INTERNAL or
// UNIMPLEMENTED). The other methods are typed callback methods.
using SchedulerServiceBase = Scheduler::WithCallbackMethod_Register<
    Scheduler::WithCallbackMethod_Heartbeat<Scheduler::WithCallbackMethod_AdvanceClock<
        Scheduler::WithCallbackMethod_ReduceNorm<Scheduler::WithCallbackMethod_Control<
            Scheduler::WithRawCallbackMethod_Status<Scheduler::Service>>>>>>;

class SchedulerService final : public SchedulerServiceBase {
 public:
  // `job` must be complete and valid. `trace` may be null.
  SchedulerService(const JobSpec& job, TraceWriter* trace, SchedulerPolicy policy = {});

  // Keeps the job's state in `state_dir` (scheduler/state_file.h) from now
  // on: written before any answer that reveals a change of its durable part
  // (JobCoordinator::DurableKey), and by PersistClocks. With `takeover`,
  // first takes the job over from it. Call once, before serving.
  absl::Status KeepState(const std::string& state_dir,
                         const std::optional<SchedulerState>& takeover)
      ABSL_LOCKS_EXCLUDED(mu_, write_mu_);
  // Writes the state if it was not written for a second (the clock table
  // moves without a durable change); file I/O outside mu_.
  void PersistClocks() ABSL_LOCKS_EXCLUDED(mu_, write_mu_);

  void SetAddress(const std::string& address);
  // Where the scheduler serves /metrics and the dashboard (its Status says).
  void SetMetricsAddress(const std::string& address);
  // Ends the job as ABORTED (e.g. the scheduler was interrupted).
  void Abort(const std::string& message);
  // The coordinator's Tick: members silent past the heartbeat timeout die.
  void CheckLiveness(absl::Time now);
  // The coordinator's Paused: this process did not run for `gap`.
  void Paused(absl::Duration gap);
  JobState job_state(std::string* message = nullptr) const;
  // JobCoordinator::MembersEnded, now.
  bool MembersEnded(absl::Duration grace) const;
  ClusterStatus GetStatus();
  // This process stops serving (the job goes on in the state dir): held
  // calls, and any held from now on, are answered UNAVAILABLE so their
  // callers retry against the scheduler that takes the job over. Call
  // before shutting the gRPC server down (which would cancel them).
  void Leave();

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
  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* ctx,
                                   const grpc::ByteBuffer* req, grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* Control(grpc::CallbackServerContext* ctx, const ControlRequest* req,
                                    ControlResponse* resp) override;

 private:
  // Where a held call's answer goes.
  struct HeldReply {
    AdvanceClockResponse* gate = nullptr;
    ReduceNormResponse* norm = nullptr;
  };
  // Tells the coordinator of held calls that were cancelled.
  void ForgetCancelled() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers the held calls the coordinator released -- after writing the
  // state if its durable part changed (a change is durable before anyone
  // hears of it). Every event goes through here before its answer.
  void Deliver() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes `state`, the snapshot numbered `seq`, unless a newer one was;
  // false when the write failed (logged once).
  bool WriteState(const SchedulerState& state, int64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Parks the call under a new ticket, or answers it at once.
  grpc::ServerUnaryReactor* Hold(grpc::CallbackServerContext* ctx, Ticket ticket, HeldReply reply,
                                 const absl::Status& status, bool parked)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the manifest the coordinator asks for (file I/O, without mu_).
  void WriteDueManifest() ABSL_LOCKS_EXCLUDED(mu_);
  // The coordinator's registration of `req` (its answer into *resp), and
  // the checkpoints' job file once a worker declared the model.
  absl::Status RegisterNow(const RegisterRequest& req, RegisterResponse* resp)
      ABSL_LOCKS_EXCLUDED(mu_);

  const JobSpec job_;
  TraceWriter* trace_;
  std::string metrics_address_ ABSL_GUARDED_BY(mu_);
  DirectoryCatalog catalog_;
  mutable absl::Mutex mu_;
  JobCoordinator coordinator_ ABSL_GUARDED_BY(mu_);
  std::map<Ticket, Parked<HeldReply>> parked_ ABSL_GUARDED_BY(mu_);
  Ticket next_ticket_ ABSL_GUARDED_BY(mu_) = 0;
  bool leaving_ ABSL_GUARDED_BY(mu_) = false;

  std::string state_dir_;  // set by KeepState before serving; empty: none
  std::string durable_key_ ABSL_GUARDED_BY(mu_);
  int64_t snapshot_seq_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Mutex write_mu_ ABSL_ACQUIRED_AFTER(mu_);
  int64_t written_seq_ ABSL_GUARDED_BY(write_mu_) = 0;
  absl::Time written_at_ ABSL_GUARDED_BY(write_mu_);
  bool write_failed_ ABSL_GUARDED_BY(write_mu_) = false;
  // Last: destroyed first, it waits for the probes whose answers use the rest.
  MemberProbe probe_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_SCHEDULER_SERVICE_H_
