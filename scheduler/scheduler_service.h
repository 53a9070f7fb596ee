// The scheduler's gRPC service: authentication, request translation and
// one parking lot for the calls the job holds (the gate, norm rounds). The
// job's rules are JobCoordinator's (scheduler/job_coordinator.h); this
// file only feeds it events with the time, answers what it decides, and
// writes the manifest it asks for outside the lock.
#ifndef PSTRAIN_SCHEDULER_SCHEDULER_SERVICE_H_
#define PSTRAIN_SCHEDULER_SCHEDULER_SERVICE_H_

#include <map>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/parked_call.h"
#include "common/trace.h"
#include "proto/cluster.grpc.pb.h"
#include "scheduler/job_coordinator.h"

namespace pstrain {

// The job's checkpoint directory (scheduler/manifest.h).
class DirectoryCatalog : public CheckpointCatalog {
 public:
  explicit DirectoryCatalog(std::string dir) : dir_(std::move(dir)) {}
  int64_t NewestCompleteSet(const std::vector<int>& servers, int64_t at_most) override;

 private:
  const std::string dir_;
};

class SchedulerService final : public Scheduler::CallbackService {
 public:
  // `job` must be complete and valid. `trace` may be null.
  SchedulerService(const JobSpec& job, TraceWriter* trace, SchedulerPolicy policy = {});

  void SetAddress(const std::string& address);
  // Where the scheduler serves /metrics and the dashboard (its Status says).
  void SetMetricsAddress(const std::string& address);
  // Ends the job as ABORTED (e.g. the scheduler was interrupted).
  void Abort(const std::string& message);
  // The coordinator's Tick: members silent past the heartbeat timeout die.
  void CheckLiveness(absl::Time now);
  JobState job_state(std::string* message = nullptr) const;
  // True once the job ended and every member has been told so (or
  // `grace` passed since the end).
  bool MembersToldOfEnd(absl::Duration grace) const;
  ClusterStatus GetStatus();

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
  grpc::ServerUnaryReactor* Control(grpc::CallbackServerContext* ctx, const ControlRequest* req,
                                    ControlResponse* resp) override;

 private:
  // Where a held call's answer goes.
  struct Slot {
    AdvanceClockResponse* gate = nullptr;
    ReduceNormResponse* norm = nullptr;
  };
  // Tells the coordinator of held calls that were cancelled.
  void ForgetCancelled() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers the held calls the coordinator released.
  void Deliver() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Parks the call under a new ticket, or answers it at once.
  grpc::ServerUnaryReactor* Hold(grpc::CallbackServerContext* ctx, Ticket ticket, Slot slot,
                                 const absl::Status& status, bool parked)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the manifest the coordinator asks for (file I/O, without mu_).
  void WriteDueManifest() ABSL_LOCKS_EXCLUDED(mu_);

  const JobSpec job_;
  TraceWriter* trace_;
  std::string metrics_address_ ABSL_GUARDED_BY(mu_);
  DirectoryCatalog catalog_;
  mutable absl::Mutex mu_;
  JobCoordinator coordinator_ ABSL_GUARDED_BY(mu_);
  std::map<Ticket, Parked<Slot>> parked_ ABSL_GUARDED_BY(mu_);
  Ticket next_ticket_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_SCHEDULER_SERVICE_H_
