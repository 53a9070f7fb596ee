// JobCoordinator taking over from a state file (a scheduler restarted, or a
// standby's takeover), with the fake clock and catalog of
// job_coordinator_fixture.h.
#include <string>
#include <vector>

#include "scheduler/job_coordinator_fixture.h"

namespace pstrain {
namespace coordinator_testing {
namespace {

// ---- Taking over from a state file.

TEST_F(JobCoordinatorTest, ATakenOverJobGoesOnWithItsMembersAndClocks) {
  Start(TwoByTwo(), {});
  JoinAll();
  bool parked = false;
  for (int64_t c = 1; c <= 3; ++c) {
    ASSERT_TRUE(Gate(0, c, &parked).ok());
    ASSERT_TRUE(Gate(1, c, &parked).ok());
  }
  const SchedulerState state = coordinator_->Snapshot();
  EXPECT_EQ(state.clocks().clocks(0), 3);
  // Meanwhile both workers went on to clock 6 (the old scheduler answered).
  now_ += absl::Seconds(30);
  Start(TwoByTwo(), {});
  ASSERT_TRUE(coordinator_->TakeOver(state, now_).ok());
  EXPECT_EQ(coordinator_->state(), RUNNING_JOB);
  EXPECT_EQ(coordinator_->DurableKey(), [&] {
    JobCoordinator again(TwoByTwo(), {}, &catalog_, {}, now_);
    EXPECT_TRUE(again.TakeOver(state, now_).ok());
    return again.DurableKey();
  }());
  // The members are known by their incarnations: no registration again.
  AllBeat();
  // Each worker's next report may jump (3 -> 6), once.
  ASSERT_TRUE(Gate(0, 6, &parked).ok());
  EXPECT_TRUE(parked);  // worker 1 is still at 3 as far as we know
  ASSERT_TRUE(Gate(1, 6, &parked).ok());
  EXPECT_FALSE(parked);
  EXPECT_EQ(Released().size(), 1u);
  EXPECT_FALSE(Gate(0, 9, &parked).ok());  // a jump only once
  // Nobody was declared dead over the 30 s the scheduler was away.
  coordinator_->Tick(now_);
  for (const MemberStatus& m : Members()) EXPECT_NE(m.state(), DEAD);
  EXPECT_EQ(coordinator_->Status(now_).scheduler_takeovers(), 1);
}

TEST_F(JobCoordinatorTest, AfterATakeoverAWorkersHeartbeatCatchesItsClockUp) {
  Start(TwoByTwo(/*checkpoint_every=*/10), {});
  JoinAll();
  const SchedulerState state = coordinator_->Snapshot();  // both at clock 0
  Start(TwoByTwo(/*checkpoint_every=*/10), {});
  ASSERT_TRUE(coordinator_->TakeOver(state, now_).ok());
  ControlRequest drain;
  drain.set_action(CHECKPOINT);
  // Not while a worker's clock is unknown: the clock asked for could be past.
  EXPECT_TRUE(absl::IsUnavailable(coordinator_->Control(drain, now_).status()));
  // Worker 1 had reported clock 5 to the old scheduler and waits in a pull
  // (it will not report again soon); worker 0 asks for clock 5.
  bool parked = false;
  ASSERT_TRUE(Gate(0, 5, &parked).ok());
  ASSERT_TRUE(parked);
  HeartbeatRequest beat;
  beat.set_incarnation(1);
  beat.mutable_status()->set_role(WORKER);
  beat.mutable_status()->set_id(1);
  beat.mutable_status()->set_state(RUNNING);
  beat.mutable_status()->set_clock(5);
  ASSERT_TRUE(coordinator_->Heartbeat(beat, now_).ok());
  EXPECT_EQ(Released().size(), 1u);  // the gate opened
  EXPECT_EQ(coordinator_->Status(now_).worker_clocks(1), 5);
  // Once: a later heartbeat does not move the table.
  beat.mutable_status()->set_clock(9);
  ASSERT_TRUE(coordinator_->Heartbeat(beat, now_).ok());
  EXPECT_EQ(coordinator_->Status(now_).worker_clocks(1), 5);
  EXPECT_TRUE(coordinator_->Control(drain, now_).ok());  // every clock known now
}

TEST_F(JobCoordinatorTest, AFinishedWorkersClockIsItsLastEvenIfItsLastReportsWereLost) {
  Start(TwoByTwo(), {});
  JoinAll();
  const SchedulerState state = coordinator_->Snapshot();  // both at clock 0
  const int64_t total = state.control().total_clocks();
  Start(TwoByTwo(), {});
  ASSERT_TRUE(coordinator_->TakeOver(state, now_).ok());
  bool parked = false;
  ASSERT_TRUE(Gate(0, 4, &parked).ok());  // worker 0's one jump
  // Its reports of clocks 5..total went to a scheduler that was leaving;
  // its final heartbeat says it finished them all.
  HeartbeatRequest beat;
  beat.set_incarnation(1);
  beat.mutable_status()->set_role(WORKER);
  beat.mutable_status()->set_id(0);
  beat.mutable_status()->set_state(FINISHED);
  beat.mutable_status()->set_clock(total);
  ASSERT_TRUE(coordinator_->Heartbeat(beat, now_).ok());
  EXPECT_EQ(coordinator_->Status(now_).worker_clocks(0), total);
  // A heartbeat overtaken by the final one does not move it back.
  beat.mutable_status()->set_clock(total - 3);
  ASSERT_TRUE(coordinator_->Heartbeat(beat, now_).ok());
  EXPECT_EQ(coordinator_->Status(now_).worker_clocks(0), total);
}

TEST_F(JobCoordinatorTest, AStateOfAnotherShapeIsRefused) {
  Start(TwoByTwo(), {});
  JoinAll();
  SchedulerState state = coordinator_->Snapshot();
  state.mutable_clocks()->add_clocks(0);  // three workers' clocks for a job of two
  Start(TwoByTwo(), {});
  EXPECT_TRUE(absl::IsInvalidArgument(coordinator_->TakeOver(state, now_)));
}

TEST_F(JobCoordinatorTest, AStateWithValuesOutOfRangeIsRefused) {
  Start(TwoByTwo(), {});
  JoinAll();
  const SchedulerState good = coordinator_->Snapshot();
  const int64_t total = good.control().total_clocks();
  ASSERT_GT(total, 0);
  std::vector<std::function<void(SchedulerState*)>> damage = {
      [](SchedulerState* s) { s->mutable_clocks()->set_clocks(0, -5); },
      [&](SchedulerState* s) { s->mutable_clocks()->set_clocks(1, total + 1); },
      [&](SchedulerState* s) { s->mutable_control()->set_total_clocks(total + 1); },
      [](SchedulerState* s) { s->mutable_control()->set_total_clocks(-1); },
      [](SchedulerState* s) { s->mutable_rollbacks()->set_generation(-1); },
      [&](SchedulerState* s) { s->mutable_rollbacks()->set_restore_clock(total + 1); },
      [](SchedulerState* s) { s->mutable_failures()->add_dead_workers(7); },
  };
  for (size_t i = 0; i < damage.size(); ++i) {
    SchedulerState state = good;
    damage[i](&state);
    Start(TwoByTwo(), {});
    EXPECT_TRUE(absl::IsInvalidArgument(coordinator_->TakeOver(state, now_))) << "case " << i;
  }
  Start(TwoByTwo(), {});
  EXPECT_TRUE(coordinator_->TakeOver(good, now_).ok());
}

TEST_F(JobCoordinatorTest, ANormRoundBegunBeforeATakeoverCompletesThroughHeartbeats) {
  JobSpec job = TwoByTwo();
  job.mutable_optimizer()->set_clip_norm(1.0);
  Start(job, {});
  JoinAll();
  const SchedulerState state = coordinator_->Snapshot();
  // Server 0's norm of round 0 was answered by the old scheduler (server 1's
  // had come in first); server 1 retries its call at the new one.
  Start(job, {});
  ASSERT_TRUE(coordinator_->TakeOver(state, now_).ok());
  ReduceNormRequest req;
  req.set_server_id(1);
  req.set_clock(0);
  req.set_sum_squares(4.0);
  req.set_incarnation(1);
  double total = 0;
  bool parked = false;
  ASSERT_TRUE(coordinator_->ReduceNorm(req, ++ticket_, now_, &total, &parked).ok());
  ASSERT_TRUE(parked);
  HeartbeatRequest beat;
  beat.set_incarnation(1);
  beat.mutable_status()->set_role(SERVER);
  beat.mutable_status()->set_id(0);
  beat.mutable_status()->set_state(RUNNING);
  beat.mutable_status()->mutable_server()->mutable_last_norm()->set_clock(0);
  beat.mutable_status()->mutable_server()->mutable_last_norm()->set_sum_squares(5.0);
  ASSERT_TRUE(coordinator_->Heartbeat(beat, now_).ok());
  const std::vector<Release> released = coordinator_->TakeReleases();
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0].sum_squares, 9.0);
}

TEST_F(JobCoordinatorTest, TimeTheSchedulerDidNotRunDoesNotCountAgainstMembers) {
  Start(TwoByTwo(), {});
  JoinAll();
  now_ += absl::Seconds(20);  // stopped for 20 s (heartbeats waited)
  coordinator_->Paused(absl::Seconds(20), now_);
  coordinator_->Tick(now_);
  for (const MemberStatus& m : Members()) EXPECT_NE(m.state(), DEAD);
  now_ += absl::Seconds(6);  // then really silent past the timeout
  coordinator_->Tick(now_);
  for (const MemberStatus& m : Members()) EXPECT_EQ(m.state(), DEAD);
}

}  // namespace
}  // namespace coordinator_testing
}  // namespace pstrain
