// JobCoordinator's moves: a server joining the running job gets the next
// id and a switch clock the gate holds; a retry of its registration gets
// the same answer; a second join while one is under way is refused; the
// servers hear of the move (MoveNews), and once the joined server holds
// its handover the placement switches in a new generation that is not a
// rollback -- with or without checkpoints. The joined server lost before
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
// the joined server's once it holds its handover of the move to that
// placement switching at clock 3 (version 0: none).
absl::StatusOr<HeartbeatResponse> BeatPlaced(JobCoordinator& c, int id, int64_t version,
                                             int64_t generation, uint64_t incarnation,
                                             absl::Time now, MemberState state = RUNNING) {
  HeartbeatRequest req;
  req.set_incarnation(incarnation);
  req.mutable_status()->set_role(SERVER);
  req.mutable_status()->set_id(id);
  req.mutable_status()->set_state(state);
  req.mutable_status()->set_generation(generation);
  ServerStatus* server = req.mutable_status()->mutable_server();
  server->set_placement_version(version);
  if (version > 0) {
    server->set_handover_version(version);
    server->set_handover_switch_clock(3);
    server->set_handed_over(true);
  }
  return c.Heartbeat(req, now);
}

// Server `id`'s heartbeat (incarnation 1, generation 0) once it heard of
// the move to placement 2 switching at clock 3, which gives it nothing.
absl::StatusOr<HeartbeatResponse> Heard(JobCoordinator& c, int id, absl::Time now) {
  HeartbeatRequest req;
  req.set_incarnation(1);
  req.mutable_status()->set_role(SERVER);
  req.mutable_status()->set_id(id);
  req.mutable_status()->set_state(RUNNING);
  ServerStatus* server = req.mutable_status()->mutable_server();
  server->set_handover_version(2);
  server->set_handover_switch_clock(3);
  server->set_handed_over(true);
  return c.Heartbeat(req, now);
}

TEST_F(JobCoordinatorTest, AJoiningServerIsHeldForAndSwitchedInOnceHandedOver) {
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
  EXPECT_EQ(st.checkpoint_asked(), 0);  // no checkpoint: the state is handed over
  // The gate holds clock 2 until the switch: every worker stops having
  // pushed it, every chunk at clock 3.
  bool parked = false;
  for (int64_t c = 0; c < 2; ++c) {
    for (int w = 0; w < 2; ++w) ASSERT_TRUE(Gate(w, c, &parked).ok());
  }
  ASSERT_TRUE(Gate(0, 2, &parked).ok());
  ASSERT_TRUE(Gate(1, 2, &parked).ok());
  EXPECT_TRUE(parked);
  EXPECT_EQ(joined->next_placement().version(), 2);
  // Every server hears of the move: where each listens, the placements.
  absl::StatusOr<HeartbeatResponse> heard = Beat(SERVER, 1);
  ASSERT_TRUE(heard.ok()) << heard.status();
  EXPECT_EQ(heard->move().from().version(), 1);
  EXPECT_EQ(heard->move().to().version(), 2);
  EXPECT_EQ(heard->move().switch_clock(), 3);
  ASSERT_EQ(heard->move().addresses_size(), 3);
  EXPECT_EQ(heard->move().addresses(2), "s2");
  // The move waits for every server to hear of it, and for server 2 to
  // hold its handover.
  st = coordinator_->Status(now_);
  EXPECT_EQ(st.placement().move().waiting_for_size(), 3);
  ASSERT_TRUE(Heard(*coordinator_, 0, now_).ok());
  ASSERT_TRUE(Heard(*coordinator_, 1, now_).ok());
  st = coordinator_->Status(now_);
  ASSERT_TRUE(st.placement().has_move());
  EXPECT_EQ(std::vector<int>(st.placement().move().waiting_for().begin(),
                             st.placement().move().waiting_for().end()),
            std::vector<int>{2});
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
  for (int64_t c = 0; c < 2; ++c) {
    for (int w = 0; w < 2; ++w) ASSERT_TRUE(Gate(w, c, &parked).ok());
  }
  ASSERT_TRUE(Gate(0, 2, &parked).ok());
  ASSERT_TRUE(Gate(1, 2, &parked).ok());
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

TEST_F(JobCoordinatorTest, AServerJoinsAJobWithoutCheckpoints) {
  Start(TwoByTwo(), SchedulerPolicy());
  JoinAll();
  absl::StatusOr<RegisterResponse> joined = JoinServer(*coordinator_, "s2", now_);
  ASSERT_TRUE(joined.ok()) << joined.status();
  ASSERT_TRUE(Heard(*coordinator_, 0, now_).ok());
  ASSERT_TRUE(Heard(*coordinator_, 1, now_).ok());
  ASSERT_TRUE(BeatPlaced(*coordinator_, 2, 2, 1, 7, now_).ok());
  EXPECT_EQ(coordinator_->Status(now_).placement().version(), 2);
}

TEST_F(JobCoordinatorTest, AHandoverThatCannotBeTakenAbandonsTheMove) {
  Start(TwoByTwo(), SchedulerPolicy());
  JoinAll();
  ASSERT_TRUE(JoinServer(*coordinator_, "s2", now_).ok());
  HeartbeatRequest req;
  req.set_incarnation(7);
  req.mutable_status()->set_role(SERVER);
  req.mutable_status()->set_id(2);
  req.mutable_status()->set_state(RUNNING);
  ServerStatus* server = req.mutable_status()->mutable_server();
  server->set_handover_version(2);
  server->set_handover_switch_clock(3);
  server->set_handover_error("server 0 cannot hand over: too large");
  absl::StatusOr<HeartbeatResponse> told = coordinator_->Heartbeat(req, now_);
  ASSERT_TRUE(told.ok()) << told.status();
  const ClusterStatus st = coordinator_->Status(now_);
  EXPECT_FALSE(st.placement().has_move());
  EXPECT_EQ(st.placement().version(), 1);
  ASSERT_EQ(st.placement().history_size(), 1);
  EXPECT_NE(st.placement().history(0).abandoned().find("too large"), std::string::npos);
  EXPECT_EQ(st.rollbacks_size(), 0);
}

}  // namespace
}  // namespace coordinator_testing
}  // namespace pstrain
