// The fixture of JobCoordinator's tests: a fake clock and a fake checkpoint
// catalog, no sockets, no threads, no files; calls as the service makes
// them (Register, Heartbeat, AdvanceClock) and what they release.
#ifndef PSTRAIN_SCHEDULER_JOB_COORDINATOR_FIXTURE_H_
#define PSTRAIN_SCHEDULER_JOB_COORDINATOR_FIXTURE_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/job_spec.h"
#include "gtest/gtest.h"
#include "scheduler/job_coordinator.h"

namespace pstrain {
namespace coordinator_testing {

// Complete checkpoint sets at fixed clocks.
class FakeCatalog : public CheckpointCatalog {
 public:
  std::vector<int64_t> complete;  // ascending
  int64_t NewestCompleteSet(const std::vector<int>&, int64_t at_most) override {
    int64_t best = 0;
    for (int64_t c : complete) {
      if (c <= at_most) best = c;
    }
    return best;
  }
};

inline JobSpec TwoByTwo(int64_t checkpoint_every = 0) {
  JobSpec job;
  job.mutable_data()->set_dataset(SYNTHETIC);
  job.set_num_servers(2);
  job.set_num_workers(2);
  job.set_batch_size(8);
  job.set_clocks(100);
  job.set_chunk_bytes(256);  // both servers hold chunks of the small MLP
  if (checkpoint_every > 0) {
    job.set_checkpoint_every(checkpoint_every);
    job.set_checkpoint_dir("/ckpt");
  }
  ApplyJobDefaults(&job);
  return job;
}

class JobCoordinatorTest : public ::testing::Test {
 protected:
  void Start(const JobSpec& job, SchedulerPolicy policy) {
    policy.heartbeat_timeout = absl::Seconds(5);
    policy.replacement_timeout = absl::Seconds(60);
    coordinator_ = std::make_unique<JobCoordinator>(
        job, policy, &catalog_, [this](const TraceEvent& e) { trace_.push_back(e); }, now_);
  }
  absl::StatusOr<RegisterResponse> Join(Role role, const std::string& address,
                                        uint64_t incarnation = 1, int id = -1) {
    RegisterRequest req;
    req.set_role(role);
    req.set_address(address);
    req.set_incarnation(incarnation);
    if (id >= 0) req.set_id(id);
    return coordinator_->Register(req, now_);
  }
  void JoinAll() {
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(Join(SERVER, "s" + std::to_string(i)).ok());
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(Join(WORKER, "w" + std::to_string(i)).ok());
    ASSERT_EQ(coordinator_->state(), RUNNING_JOB);
  }
  absl::StatusOr<HeartbeatResponse> Beat(Role role, int id, MemberState state = RUNNING,
                                         int64_t generation = 0, uint64_t incarnation = 1) {
    HeartbeatRequest req;
    req.set_incarnation(incarnation);
    req.mutable_status()->set_role(role);
    req.mutable_status()->set_id(id);
    req.mutable_status()->set_state(state);
    req.mutable_status()->set_generation(generation);
    return coordinator_->Heartbeat(req, now_);
  }
  // A gate call: its answer, or parked (ticket returned in *ticket);
  // `pushed`: the iterations whose pushes the worker knows landed.
  absl::Status Gate(int worker, int64_t clock, bool* parked, int64_t generation = 0,
                    uint64_t incarnation = 1, int64_t pushed = 0) {
    AdvanceClockRequest req;
    req.set_worker_id(worker);
    req.set_clock(clock);
    req.set_generation(generation);
    req.set_incarnation(incarnation);
    req.set_pushed_clock(pushed);
    last_response_.Clear();
    return coordinator_->AdvanceClock(req, ++ticket_, now_, &last_response_, parked);
  }
  // A pipeline stage's gate call in link generation `link_generation`; `relink`: its
  // links broke.
  absl::Status StageGate(int worker, int64_t clock, int64_t link_generation, bool relink,
                         bool* parked, uint64_t incarnation = 1) {
    AdvanceClockRequest req;
    req.set_worker_id(worker);
    req.set_clock(clock);
    req.set_incarnation(incarnation);
    req.set_link_generation(link_generation);
    req.set_relink(relink);
    last_response_.Clear();
    return coordinator_->AdvanceClock(req, ++ticket_, now_, &last_response_, parked);
  }
  // The tickets released since the last call, with their statuses.
  std::map<Ticket, absl::Status> Released() {
    std::map<Ticket, absl::Status> out;
    for (Release& r : coordinator_->TakeReleases()) {
      out[r.ticket] = r.status;
      released_.push_back(std::move(r));
    }
    return out;
  }
  // Every member heartbeats at now_.
  void AllBeat() {
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(Beat(SERVER, i).ok());
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(Beat(WORKER, i).ok());
  }

  // Every member as the Status reports it now.
  std::vector<MemberStatus> Members() {
    const ClusterStatus st = coordinator_->Status(now_);
    return {st.members().begin(), st.members().end()};
  }

  absl::Time now_ = absl::FromUnixSeconds(1000);
  FakeCatalog catalog_;
  std::vector<TraceEvent> trace_;
  std::unique_ptr<JobCoordinator> coordinator_;
  Ticket ticket_ = 0;
  AdvanceClockResponse last_response_;
  std::vector<Release> released_;
};

}  // namespace coordinator_testing
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_JOB_COORDINATOR_FIXTURE_H_
