// A member's (server's or worker's) side of the scheduler protocol:
// registration with retries, heartbeats in the background, the clock gate.
#ifndef PSTRAIN_COMMON_SCHEDULER_CLIENT_H_
#define PSTRAIN_COMMON_SCHEDULER_CLIENT_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/retry.h"
#include "proto/cluster.grpc.pb.h"

namespace pstrain {

struct SchedulerClientOptions {
  std::string scheduler;  // HOST:PORT
  Role role = ROLE_UNSPECIFIED;
  std::string address;  // this member's own service
  // A member taking over the id of a failed one (--id); -1: any. With
  // replace_live, even from a member that still answers.
  int id = -1;
  bool replace_live = false;
  // How long Register keeps retrying an unreachable scheduler.
  absl::Duration connect_timeout = absl::Seconds(60);
  absl::Duration heartbeat_interval = absl::Milliseconds(500);
  // How long a lost scheduler is retried (heartbeats, the gate, norms)
  // before the job ends for this member (ABORTED): longer than a network
  // cut a member should survive, or a restarted scheduler takes to be back.
  absl::Duration scheduler_timeout = absl::Seconds(30);
};

// Thread-safe.
class SchedulerClient {
 public:
  explicit SchedulerClient(SchedulerClientOptions options);
  ~SchedulerClient();

  // Registers, retrying with exponential backoff while the scheduler is
  // unreachable. UNAVAILABLE naming the address after connect_timeout; the
  // scheduler's own error (ALREADY_EXISTS, RESOURCE_EXHAUSTED, ...) at once.
  // A worker of an EXTERNAL model declares it in `declared` (its params
  // and train_size; the other fields are filled in).
  absl::StatusOr<RegisterResponse> Register(RegisterRequest declared = {});
  // The job as the scheduler holds it now (its Status' job): a server of an
  // EXTERNAL model waits for the first worker to declare it. One call, no
  // retries.
  absl::StatusOr<JobSpec> CurrentJob();

  // Starts heartbeats every interval carrying status_fn(). Call after Register.
  void StartHeartbeats(std::function<MemberStatus()> status_fn);
  // Stops the heartbeat thread (waits for a heartbeat in flight). Idempotent.
  void StopHeartbeats();
  // Reports a member's last state (FINISHED or FAILED): stops the heartbeat
  // thread first, so that no older RUNNING heartbeat can arrive after it,
  // then sends `status` until the scheduler takes it, retrying with backoff
  // for up to scheduler_timeout.
  absl::Status ReportFinal(const MemberStatus& status);
  // Sends one heartbeat now (a final FINISHED or FAILED report) and returns
  // the job's state as the scheduler sees it.
  absl::StatusOr<HeartbeatResponse> Heartbeat(const MemberStatus& status);
  // Sends one heartbeat of `status` and nothing else: no lock of this
  // client's taken, nothing of its state changed, 2 s at most -- what a
  // process failing for want of memory can still do (common/daemon.h's
  // SetOutOfMemoryReport).
  absl::Status SendLastWords(const MemberStatus& status) const;
  // Blocks until heartbeats report the job DONE or ABORTED (or the scheduler
  // is lost, which counts as ABORTED); returns the state, sets *message.
  JobState WaitForJobEnd(std::string* message);
  // The last job state heartbeats saw.
  JobState job_state(std::string* message = nullptr) const;
  // Workers that left the job, as of the last heartbeat.
  std::vector<int> dead_workers() const;
  // The cluster's generation and the checkpoint clock it restarted from, as of
  // the last heartbeat (0 and 0 until one is answered).
  int64_t generation(int64_t* restore_clock = nullptr) const;
  // The clock of the newest complete checkpoint set, as of the last heartbeat.
  int64_t manifest_clock() const;
  // Standby copies: who serves which chunks, as the last heartbeat
  // answer said (the registration's until then; empty without standby copies).
  ServerRoutes routes() const;
  void SetRoutes(const ServerRoutes& routes);
  // The job's placement once a move changed it (version > 1), the newest
  // the registration or a heartbeat answer carried (version 0 until one
  // did: the initial placement).
  Placement placement() const;
  void SetPlacement(const Placement& placement);
  // The move under way, as the last heartbeat answer said (none: an empty
  // MoveNews, version 0).
  MoveNews move() const;
  // The next heartbeat goes now, not at its interval: a step the scheduler
  // waits for is done (a move's handover held, a new generation's state).
  void BeatNow();
  // A pipeline stage's replica's link generation, as of the last heartbeat.
  int64_t link_generation() const;
  // A server out of the job (HeartbeatResponse.leave): why it must leave,
  // as of the last heartbeat (empty: it is in the job).
  std::string leave() const;

  // The gate: reports that `worker` finished `clock` iterations in cluster
  // generation `generation` and waits until it may start iteration `clock`. Waits
  // across repeated deadlines (logging what it waits for) until the job
  // ends; ABORTED if it was aborted. An answer of another generation means the
  // cluster rolled back: resume at its resume_clock.
  absl::StatusOr<AdvanceClockResponse> AdvanceClock(int worker, int64_t clock,
                                                    int64_t generation = 0);
  // The same with every field of the request (pipeline stages: the link
  // link generation, a relink); the incarnation is filled in.
  absl::StatusOr<AdvanceClockResponse> AdvanceClock(AdvanceClockRequest req);

  // BSP clipping: reports this server's sum of squares of round `clock`'s
  // mean gradient and waits for the sum over every server holding chunks.
  // Retries like AdvanceClock; ABORTED once the job has ended.
  absl::StatusOr<double> ReduceNorm(int server, int64_t generation, int64_t clock,
                                    double sum_squares);

  uint64_t incarnation() const { return incarnation_; }

 private:
  void HeartbeatLoop(std::function<MemberStatus()> status_fn);
  // The retry policy of a call the scheduler holds until something happens.
  RetryPolicy WaitingCallPolicy(std::function<void()> still_waiting) const;

  const SchedulerClientOptions options_;
  const uint64_t incarnation_;
  std::unique_ptr<Scheduler::Stub> stub_;

  mutable absl::Mutex mu_;
  JobState job_state_ ABSL_GUARDED_BY(mu_) = WAITING;
  std::string job_message_ ABSL_GUARDED_BY(mu_);
  std::vector<int> dead_workers_ ABSL_GUARDED_BY(mu_);
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t restore_clock_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t manifest_clock_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t link_generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::string leave_ ABSL_GUARDED_BY(mu_);
  absl::Duration next_beat_ ABSL_GUARDED_BY(mu_);  // HeartbeatResponse.next_heartbeat_ms (0: none)
  ServerRoutes routes_ ABSL_GUARDED_BY(mu_);
  Placement placement_ ABSL_GUARDED_BY(mu_);
  MoveNews move_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool beat_now_ ABSL_GUARDED_BY(mu_) = false;
  bool lost_scheduler_ ABSL_GUARDED_BY(mu_) = false;
  // When the scheduler last answered (a registration or a heartbeat): the
  // members' window counts from here.
  absl::Time last_heard_ ABSL_GUARDED_BY(mu_) = absl::Now();
  std::thread heartbeat_thread_;
};

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_SCHEDULER_CLIENT_H_
