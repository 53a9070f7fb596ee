// JobCoordinator's moves: a server joining the running job gets the next
// id and a switch clock the gate holds; a retry of its registration gets
// the same answer; a second join while one is under way, or a join into a
// job without checkpoints, is refused; the manifest naming the switch
// clock and the joined server holding its chunks switch the placement in
// a new generation that is not a rollback. The joined server lost before
// the switch abandons the move, nothing rolled back, and its id is free
// again; an owner lost rolls the job back without the joined server,
// which is told to leave.
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

// Server `id`'s heartbeat (`incarnation`) naming placement `version`:
// the joined server's once it holds its chunks of the move's placement.
absl::StatusOr<HeartbeatResponse> BeatPlaced(JobCoordinator& c, int id, int64_t version,
                                             int64_t generation, uint64_t incarnation,
                                             absl::Time now, MemberState state = RUNNING) {
  HeartbeatRequest req;
  req.set_incarnation(incarnation);
  req.mutable_status()->set_role(SERVER);
  req.mutable_status()->set_id(id);
  req.mutable_status()->set_state(state);
  req.mutable_status()->set_generation(generation);
  req.mutable_status()->mutable_server()->set_placement_version(version);
  return c.Heartbeat(req, now);
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
  EXPECT_EQ(joined->next_placement().version(), 2);
  coordinator_->ManifestWritten(3, absl::OkStatus(), now_);
  // Named: server 2 loads its chunks from it; until it says it holds
  // them the move waits for it alone.
  st = coordinator_->Status(now_);
  ASSERT_TRUE(st.placement().has_move());
  ASSERT_GT(st.placement().move().waiting_for_size(), 0);
  EXPECT_EQ(*st.placement().move().waiting_for().rbegin(), 2);
  absl::StatusOr<HeartbeatResponse> ready = BeatPlaced(*coordinator_, 2, 2, 1, 7, now_);
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_EQ(ready->leave(), "");
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

TEST_F(JobCoordinatorTest, AJoinedServerLostBeforeTheSwitchAbandonsTheMoveWithoutARollback) {
  Start(TwoByTwo(/*checkpoint_every=*/10), SchedulerPolicy());
  JoinAll();
  ASSERT_TRUE(JoinServer(*coordinator_, "s2", now_).ok());
  bool parked = false;
  for (int64_t c = 0; c < 3; ++c) {
    for (int w = 0; w < 2; ++w) ASSERT_TRUE(Gate(w, c, &parked).ok());
  }
  ASSERT_TRUE(Gate(0, 3, &parked).ok());
  ASSERT_TRUE(Gate(1, 3, &parked).ok());
  ASSERT_TRUE(parked);  // held for the switch
  const Ticket held = ticket_;
  coordinator_->ManifestWritten(3, absl::OkStatus(), now_);
  // Server 2 goes silent before it holds its chunks: declared dead.
  now_ += absl::Seconds(6);
  AllBeat();
  coordinator_->Tick(now_);
  const ClusterStatus st = coordinator_->Status(now_);
  EXPECT_EQ(st.job_state(), RUNNING_JOB);
  EXPECT_EQ(st.placement().version(), 1);
  EXPECT_FALSE(st.placement().has_move());
  ASSERT_EQ(st.placement().history_size(), 1);
  EXPECT_EQ(st.placement().history(0).abandoned(), "server 2 was lost");
  EXPECT_EQ(st.rollbacks_size(), 0);
  EXPECT_EQ(st.generation(), 0);
  // The hold is gone: the held worker goes on.
  const std::map<Ticket, absl::Status> released = Released();
  ASSERT_EQ(released.count(held), 1u);
  EXPECT_TRUE(released.at(held).ok());
  // Heard again, server 2 is told to leave; its end changes nothing.
  absl::StatusOr<HeartbeatResponse> beat = BeatPlaced(*coordinator_, 2, 0, 0, 7, now_);
  ASSERT_TRUE(beat.ok()) << beat.status();
  EXPECT_EQ(beat->leave(), "the move that added server 2 was abandoned: server 2 was lost");
  ASSERT_TRUE(BeatPlaced(*coordinator_, 2, 0, 0, 7, now_, FAILED).ok());
  EXPECT_EQ(coordinator_->state(), RUNNING_JOB);
  // A server started in its place (without --join) is refused; the next
  // join takes its id.
  const absl::Status replaced = Join(SERVER, "s2b", /*incarnation=*/9, /*id=*/2).status();
  EXPECT_EQ(replaced.code(), absl::StatusCode::kFailedPrecondition) << replaced;
  absl::StatusOr<RegisterResponse> again = JoinServer(*coordinator_, "s2c", now_, 10);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->id(), 2);
  EXPECT_EQ(coordinator_->Status(now_).members_size(), 5);
}

TEST_F(JobCoordinatorTest, AnOwnerLostMidMoveRollsBackWithoutTheJoinedServer) {
  Start(TwoByTwo(/*checkpoint_every=*/10), SchedulerPolicy());
  JoinAll();
  ASSERT_TRUE(JoinServer(*coordinator_, "s2", now_).ok());
  // Server 0 goes silent before the switch: the move is abandoned and the
  // job rolls back as it would without one.
  now_ += absl::Seconds(6);
  ASSERT_TRUE(Beat(SERVER, 1).ok());
  for (int w = 0; w < 2; ++w) ASSERT_TRUE(Beat(WORKER, w).ok());
  ASSERT_TRUE(BeatPlaced(*coordinator_, 2, 0, 0, 7, now_).ok());
  coordinator_->Tick(now_);
  ClusterStatus st = coordinator_->Status(now_);
  ASSERT_EQ(st.rollbacks_size(), 1);
  EXPECT_EQ(st.rollbacks(0).placement_version(), 0);  // a rollback, not a switch
  ASSERT_EQ(st.placement().history_size(), 1);
  EXPECT_NE(st.placement().history(0).abandoned(), "");
  absl::StatusOr<HeartbeatResponse> told = BeatPlaced(*coordinator_, 2, 0, 0, 7, now_);
  ASSERT_TRUE(told.ok()) << told.status();
  EXPECT_NE(told->leave().find("was abandoned"), std::string::npos) << told->leave();
  // Server 0 replaced, the two servers of the placement restore: the
  // rollback ends without server 2, which failed meanwhile.
  ASSERT_TRUE(BeatPlaced(*coordinator_, 2, 0, 0, 7, now_, FAILED).ok());
  ASSERT_TRUE(Join(SERVER, "s0b", /*incarnation=*/2, /*id=*/0).ok());
  ASSERT_TRUE(Beat(SERVER, 0, RUNNING, 1, /*incarnation=*/2).ok());
  ASSERT_TRUE(Beat(SERVER, 1, RUNNING, 1).ok());
  st = coordinator_->Status(now_);
  EXPECT_EQ(st.job_state(), RUNNING_JOB);
  EXPECT_GT(st.rollbacks(0).done_unix_ms(), 0);
  EXPECT_EQ(st.generation(), 1);
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
