// PipelineRestarts: link generations, a restart's life, rollbacks, timeouts.
#include "scheduler/pipeline_restarts.h"

#include "gtest/gtest.h"

namespace pstrain {
namespace {

// Two replicas of two stages: workers 0, 1 and 2, 3.
class PipelineRestartsTest : public ::testing::Test {
 protected:
  PipelineRestartsTest() : restarts_(4, 2), members_(1, 4) {
    for (int w = 0; w < 4; ++w) {
      EXPECT_TRUE(members_.Register(WORKER, "w" + std::to_string(w), 1, now_).ok());
    }
  }
  std::vector<std::string> Pending(int replica) {
    return restarts_.Pending(replica, members_, [this](int w) { return at_gate_[w]; });
  }

  absl::Time now_ = absl::FromUnixSeconds(100);
  PipelineRestarts restarts_;
  Membership members_;
  bool at_gate_[4] = {false, false, false, false};
};

TEST_F(PipelineRestartsTest, ARestartMovesTheLinkGenerationOnceAndWaitsForEveryStage) {
  ASSERT_TRUE(restarts_.pipelined());
  EXPECT_EQ(restarts_.ReplicaOf(3), 1);
  restarts_.Begin(1, "worker 3 declared dead", now_);
  restarts_.Begin(1, "worker 2's pipeline links broke", now_);  // under way: no second
  EXPECT_EQ(restarts_.link_generation(1), 1);
  EXPECT_EQ(restarts_.link_generation(0), 0);
  EXPECT_TRUE(restarts_.restarting(1));
  ASSERT_EQ(restarts_.restarts().size(), 1);
  EXPECT_EQ(restarts_.restarts()[0].reason(), "worker 3 declared dead");
  members_.Get(WORKER, 3)->state = DEAD;
  at_gate_[2] = true;
  EXPECT_EQ(Pending(1), std::vector<std::string>(
                            {"worker 3 to come back or a replacement (ps_worker --id=3)"}));
  members_.Get(WORKER, 3)->state = RUNNING;
  EXPECT_EQ(Pending(1), std::vector<std::string>({"worker 3 (stage 1) at the gate"}));
  at_gate_[3] = true;
  EXPECT_TRUE(Pending(1).empty());
  now_ += absl::Seconds(2);
  restarts_.End(1, /*clock=*/7, now_);
  EXPECT_FALSE(restarts_.restarting(1));
  EXPECT_EQ(restarts_.restarts()[0].clock(), 7);
  EXPECT_EQ(restarts_.restarts()[0].done_unix_ms(), absl::ToUnixMillis(now_));
}

TEST_F(PipelineRestartsTest, AnUnregisteredStageIsPending) {
  Membership two(1, 4);
  ASSERT_TRUE(two.Register(WORKER, "w0", 1, now_).ok());
  EXPECT_EQ(restarts_.Pending(0, two, [](int) { return true; }),
            std::vector<std::string>({"worker 1 to register"}));
}

TEST_F(PipelineRestartsTest, ARollbackRelinksEveryReplicaAndEndsTheRestartUnderWay) {
  restarts_.Begin(0, "worker 0 declared dead", now_);
  restarts_.RolledBack(/*clock=*/10, now_);
  EXPECT_EQ(restarts_.link_generation(0), 2);
  EXPECT_EQ(restarts_.link_generation(1), 1);
  EXPECT_FALSE(restarts_.restarting(0));
  EXPECT_EQ(restarts_.restarts()[0].clock(), 10);
  EXPECT_NE(restarts_.restarts()[0].done_unix_ms(), 0);
}

TEST_F(PipelineRestartsTest, ARestartPastTheTimeoutIsOverdue) {
  restarts_.Begin(1, "links broke", now_);
  EXPECT_FALSE(restarts_.Overdue(now_ + absl::Seconds(60), absl::Seconds(60)).has_value());
  EXPECT_EQ(restarts_.Overdue(now_ + absl::Seconds(61), absl::Seconds(60)), 1);
  MemberStatus me;
  restarts_.AddWaits(
      members_, [](int) { return false; }, &me);
  ASSERT_EQ(me.waits_size(), 1);
  EXPECT_EQ(
      me.waits(0).what(),
      "replica 1's pipeline restart (link generation 1): waiting for worker 2 (stage 0) at the "
      "gate, worker 3 (stage 1) at the gate");
}

TEST_F(PipelineRestartsTest, RestoreTakesOnlyAStateOfThisShape) {
  PipelineRestartState state = restarts_.Snapshot();
  state.mutable_replicas(0)->set_link_generation(4);
  ASSERT_TRUE(restarts_.Restore(state).ok());
  EXPECT_EQ(restarts_.link_generation(0), 4);
  state.add_replicas();
  EXPECT_TRUE(absl::IsInvalidArgument(restarts_.Restore(state)));
  state.mutable_replicas()->RemoveLast();
  state.mutable_replicas(1)->set_link_generation(-1);
  EXPECT_TRUE(absl::IsInvalidArgument(restarts_.Restore(state)));
  EXPECT_EQ(restarts_.link_generation(0), 4);  // unchanged
  EXPECT_FALSE(PipelineRestarts(4, 1).pipelined());
  EXPECT_EQ(PipelineRestarts(4, 1).Snapshot().replicas_size(), 0);
}

}  // namespace
}  // namespace pstrain
