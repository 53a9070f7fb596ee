// JobCoordinator's moves: a server joining the running job gets the next
// id and a switch clock the gate holds; a retry of its registration gets
// the same answer; a second join while one is under way, or a join into a
// job without checkpoints, is refused; the manifest naming the switch
// clock switches the placement in a new generation that is not a rollback.
#include "scheduler/job_coordinator_fixture.h"

namespace pstrain {
namespace coordinator_testing {
namespace {

absl::StatusOr<RegisterResponse> JoinServer(JobCoordinator& c, const std::string& address,
                                            absl::Time now, uint64_t incarnation = 7) {
  RegisterRequest req;
  req.set_role(SERVER);
  req.set_address(address);
  req.set_incarnation(incarnation);
  req.set_join(true);
  return c.Register(req, now);
}

TEST_F(JobCoordinatorTest, AJoiningServerIsHeldForAndSwitchedInAtACheckpoint) {
  Start(TwoByTwo(/*checkpoint_every=*/10), SchedulerPolicy());
  JoinAll();
  absl::StatusOr<RegisterResponse> joined = JoinServer(*coordinator_, "s2", now_);
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->id(), 2);
  EXPECT_EQ(joined->start_clock(), 3);  // three clocks past the fastest worker's
  // Its answer lost, it asks again: the same answer, not a second move.
  absl::StatusOr<RegisterResponse> again = JoinServer(*coordinator_, "s2", now_);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->id(), 2);
  absl::Status other = JoinServer(*coordinator_, "s3", now_, 8).status();
  EXPECT_EQ(other.code(), absl::StatusCode::kFailedPrecondition) << other;
  EXPECT_NE(other.message().find("under way"), absl::string_view::npos) << other;

  ClusterStatus st = coordinator_->Status(now_);
  EXPECT_EQ(st.placement().move().switch_clock(), 3);
  EXPECT_EQ(st.checkpoint_asked(), 3);
  // The gate holds clock 3 until the switch, every worker there.
  bool parked = false;
  for (int64_t c = 0; c < 3; ++c) {
    for (int w = 0; w < 2; ++w) ASSERT_TRUE(Gate(w, c, &parked).ok());
  }
  ASSERT_TRUE(Gate(0, 3, &parked).ok());
  ASSERT_TRUE(Gate(1, 3, &parked).ok());
  EXPECT_TRUE(parked);
  coordinator_->ManifestWritten(3, absl::OkStatus(), now_);
  st = coordinator_->Status(now_);
  EXPECT_EQ(st.placement().version(), 2);
  EXPECT_EQ(st.placement().servers_size(), 3);
  EXPECT_FALSE(st.placement().has_move());
  EXPECT_EQ(st.generation(), 1);
  ASSERT_EQ(st.rollbacks_size(), 1);
  EXPECT_EQ(st.rollbacks(0).placement_version(), 2);
  EXPECT_EQ(st.rollbacks(0).to_clock(), 3);
  // The servers hear the placement (their Status names another version).
  absl::StatusOr<HeartbeatResponse> beat = Beat(SERVER, 0);
  ASSERT_TRUE(beat.ok()) << beat.status();
  EXPECT_EQ(beat->placement().version(), 2);
  EXPECT_EQ(beat->generation(), 1);
  EXPECT_EQ(beat->restore_clock(), 3);
}

TEST_F(JobCoordinatorTest, AJoinIntoAJobWithoutCheckpointsIsRefused) {
  Start(TwoByTwo(), SchedulerPolicy());
  JoinAll();
  const absl::Status st = JoinServer(*coordinator_, "s2", now_).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("checkpoint"), absl::string_view::npos) << st;
  EXPECT_EQ(coordinator_->Status(now_).placement().version(), 1);
  EXPECT_EQ(coordinator_->Status(now_).members_size(), 4);  // nobody joined
}

}  // namespace
}  // namespace coordinator_testing
}  // namespace pstrain
