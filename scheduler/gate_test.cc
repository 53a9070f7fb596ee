// The gate on its own: a BSP job of two workers and two servers, with a
// fake clock, the trace as the log of what happened.
#include "scheduler/gate.h"

#include "common/job_spec.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

class NoCheckpoints : public CheckpointCatalog {
 public:
  int64_t NewestCompleteSet(const std::vector<int>&, int64_t) override { return 0; }
};

JobSpec TwoByTwo() {
  JobSpec job;
  job.mutable_data()->set_dataset(SYNTHETIC);
  job.set_num_servers(2);
  job.set_num_workers(2);
  job.set_batch_size(8);
  job.set_clocks(100);
  ApplyJobDefaults(&job);
  return job;
}

class GateTest : public ::testing::Test {
 protected:
  GateTest()
      : job_(TwoByTwo()),
        members_(2, 2),
        clocks_(2, /*staleness=*/0),
        rollbacks_(job_, {0, 1}, &catalog_, 0),
        control_(job_),
        pipelines_(2, 1),
        gate_(&phase_, {true, true}, TotalClocks(job_), &clocks_, &members_, &rollbacks_, &control_,
              &pipelines_, [this](const TraceEvent& e) {
                log_.push_back(e.event() + std::to_string(e.worker()) + ":" +
                               std::to_string(e.clock()));
              }) {
    for (int i = 0; i < 2; ++i) {
      EXPECT_TRUE(members_.Register(SERVER, "s" + std::to_string(i), 1, now_).ok());
      EXPECT_TRUE(members_.Register(WORKER, "w" + std::to_string(i), 1, now_).ok());
    }
    phase_.state = RUNNING_JOB;
  }
  // Worker `w` reports `clock` finished and asks to start it.
  absl::Status Report(int w, int64_t clock, bool* parked, int64_t generation = 0) {
    AdvanceClockRequest req;
    req.set_worker_id(w);
    req.set_clock(clock);
    req.set_generation(generation);
    response_.Clear();
    *parked = false;
    if (generation < rollbacks_.generation()) {
      return gate_.AskOfOlderGeneration(req, ++ticket_, now_, &response_, parked);
    }
    if (absl::StatusOr<bool> moved = gate_.Advance(w, clock); !moved.ok()) return moved.status();
    return gate_.Ask(req, ++ticket_, now_, &response_, parked);
  }
  absl::Status Norm(int s, int64_t clock, double sum, bool* parked, double* total) {
    ReduceNormRequest req;
    req.set_server_id(s);
    req.set_clock(clock);
    req.set_sum_squares(sum);
    *parked = false;
    return gate_.ReduceNorm(req, ++ticket_, now_, total, parked);
  }

  absl::Time now_ = absl::FromUnixSeconds(100);
  NoCheckpoints catalog_;
  JobSpec job_;
  JobPhase phase_;
  Membership members_;
  ClockTable clocks_;
  Rollbacks rollbacks_;
  OperatorControl control_;
  PipelineRestarts pipelines_;
  std::vector<std::string> log_;
  Gate gate_;
  Ticket ticket_ = 0;
  AdvanceClockResponse response_;
};

TEST_F(GateTest, UnderBspAWorkerWaitsForTheSlowestAndIsToldTheCluster) {
  bool parked = false;
  ASSERT_TRUE(Report(0, 0, &parked).ok());
  EXPECT_FALSE(parked);
  EXPECT_EQ(response_.cluster().workers_size(), 2);
  EXPECT_EQ(response_.live_workers_size(), 2);
  ASSERT_TRUE(Report(0, 1, &parked).ok());
  ASSERT_TRUE(parked);
  const Ticket waiting = ticket_;
  EXPECT_TRUE(gate_.AtGate(0));
  ASSERT_TRUE(Report(1, 1, &parked).ok());
  EXPECT_FALSE(parked);
  const std::vector<Release> released = gate_.TakeReleases();
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0].ticket, waiting);
  EXPECT_EQ(released[0].gate.slowest_clock(), 1);
  EXPECT_EQ(log_,
            std::vector<std::string>({"start0:0", "clock0:1", "clock1:1", "start0:1", "start1:1"}));
}

TEST_F(GateTest, TheJobsEndFailsEveryHeldCall) {
  bool parked = false;
  ASSERT_TRUE(Report(0, 1, &parked).ok());
  ASSERT_TRUE(parked);
  phase_.state = ABORTED;
  phase_.message = "stopped";
  gate_.Wake();
  const std::vector<Release> released = gate_.TakeReleases();
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0].status, absl::AbortedError("job ended: stopped"));
}

TEST_F(GateTest, ANormRoundAnswersOnceEveryServerReported) {
  bool parked = false;
  double total = 0;
  ASSERT_TRUE(Norm(1, 0, 4.0, &parked, &total).ok());
  ASSERT_TRUE(parked);
  ASSERT_TRUE(Norm(0, 0, 5.0, &parked, &total).ok());
  EXPECT_FALSE(parked);
  EXPECT_EQ(total, 9.0);
  const std::vector<Release> released = gate_.TakeReleases();
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0].sum_squares, 9.0);
}

TEST_F(GateTest, ARollbackFailsOpenNormRoundsAndHoldsWorkersOfTheOldGenerationUntilItEnds) {
  bool parked = false;
  double total = 0;
  for (int64_t c = 1; c <= 3; ++c) {
    ASSERT_TRUE(Report(0, c, &parked).ok());
    ASSERT_TRUE(Report(1, c, &parked).ok());
  }
  ASSERT_TRUE(Norm(0, 3, 1.0, &parked, &total).ok());
  ASSERT_TRUE(parked);
  gate_.TakeReleases();
  rollbacks_.Begin("server 1 declared dead", 3, now_);
  gate_.RolledBack(rollbacks_.restore_clock());
  std::vector<Release> released = gate_.TakeReleases();
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0].status,
            absl::FailedPreconditionError("the cluster rolled back (generation 1)"));
  EXPECT_EQ(clocks_.clock(0), 0);
  // A worker of generation 0 is told where to resume once the servers restored.
  ASSERT_TRUE(Report(0, 4, &parked, /*generation=*/0).ok());
  ASSERT_TRUE(parked);
  for (int s = 0; s < 2; ++s) members_.Get(SERVER, s)->status.set_generation(1);
  ASSERT_TRUE(rollbacks_.MaybeEnd(members_, now_));
  gate_.Wake();
  released = gate_.TakeReleases();
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0].gate.resume_clock(), 0);
  EXPECT_EQ(released[0].gate.generation(), 1);
}

}  // namespace
}  // namespace pstrain
