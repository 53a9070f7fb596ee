// JobCoordinator's rules with a fake clock and a fake checkpoint catalog
// (job_coordinator_fixture.h): membership, failures, rollbacks, the end.
// Pipeline replicas: job_coordinator_pipeline_test.cc.
// Taking over from a state file: job_coordinator_takeover_test.cc.
#include <string>
#include <vector>

#include "scheduler/job_coordinator_fixture.h"

namespace pstrain {
namespace coordinator_testing {
namespace {

TEST_F(JobCoordinatorTest, ASilentMemberDiesOnlyPastTheTimeout) {
  Start(TwoByTwo(), {});
  JoinAll();
  now_ += absl::Seconds(5);  // exactly the timeout: still alive
  coordinator_->Tick(now_);
  ClusterStatus st = coordinator_->Status(now_);
  for (const MemberStatus& m : st.members()) EXPECT_NE(m.state(), DEAD);
  ASSERT_TRUE(Beat(SERVER, 0).ok());
  ASSERT_TRUE(Beat(SERVER, 1).ok());
  ASSERT_TRUE(Beat(WORKER, 0).ok());
  now_ += absl::Milliseconds(1);  // worker 1: 5.001 s of silence
  coordinator_->Tick(now_);
  st = coordinator_->Status(now_);
  EXPECT_EQ(st.members(3).state(), DEAD);
  EXPECT_EQ(st.members(3).declared_dead_unix_ms(), absl::ToUnixMillis(now_));
  EXPECT_NE(st.members(3).message().find("no heartbeat for 5s"), std::string::npos)
      << st.members(3).message();
  EXPECT_NE(st.members(2).state(), DEAD);
}

TEST_F(JobCoordinatorTest, ShrinkTakesADeadWorkerOutOfTheGate) {
  Start(TwoByTwo(), {});  // BSP
  JoinAll();
  bool parked = false;
  ASSERT_TRUE(Gate(0, 0, &parked).ok());
  EXPECT_FALSE(parked);  // clock 0 opens at once
  ASSERT_TRUE(Gate(0, 1, &parked).ok());
  ASSERT_TRUE(parked);  // waits for worker 1
  const Ticket waiting = ticket_;
  now_ += absl::Seconds(6);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(Beat(SERVER, i).ok());
  ASSERT_TRUE(Beat(WORKER, 0).ok());
  coordinator_->Tick(now_);  // worker 1 dies: the gate goes on without it
  const std::map<Ticket, absl::Status> r = Released();
  ASSERT_EQ(r.count(waiting), 1u);
  EXPECT_TRUE(r.at(waiting).ok());
  EXPECT_EQ(released_.back().gate.live_workers_size(), 1);
  EXPECT_EQ(coordinator_->state(), RUNNING_JOB);
  ASSERT_TRUE(Beat(SERVER, 0).ok());
  EXPECT_EQ(Beat(SERVER, 0)->dead_workers_size(), 1);
}

TEST_F(JobCoordinatorTest, WaitHoldsTheGateAndAReplacementTakesTheId) {
  SchedulerPolicy policy;
  policy.on_worker_failure = WorkerFailure::kWait;
  Start(TwoByTwo(), policy);
  JoinAll();
  bool parked = false;
  // Worker 1 finished clock 0, its push acknowledged, ...
  ASSERT_TRUE(Gate(1, 1, &parked, 0, 1, /*pushed=*/1).ok());
  ASSERT_TRUE(parked);  // ... and waits for worker 0
  const Ticket first = ticket_;
  ASSERT_TRUE(Gate(0, 1, &parked).ok());
  ASSERT_FALSE(parked);
  EXPECT_EQ(Released().count(first), 1u);
  ASSERT_TRUE(Gate(0, 2, &parked).ok());
  ASSERT_TRUE(parked);
  const Ticket waiting = ticket_;
  now_ += absl::Seconds(6);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(Beat(SERVER, i).ok());
  ASSERT_TRUE(Beat(WORKER, 0).ok());
  coordinator_->Tick(now_);  // worker 1 dies; its place is kept
  EXPECT_TRUE(Released().empty());
  EXPECT_EQ(coordinator_->state(), RUNNING_JOB);
  // A replacement with --id=1 takes over at worker 1's clock.
  const absl::StatusOr<RegisterResponse> joined = Join(WORKER, "w1b", /*incarnation=*/2, 1);
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->id(), 1);
  EXPECT_EQ(joined->start_clock(), 1);
  ASSERT_TRUE(Gate(1, 2, &parked, 0, /*incarnation=*/2).ok());
  const std::map<Ticket, absl::Status> r = Released();
  ASSERT_EQ(r.count(waiting), 1u);
  EXPECT_TRUE(r.at(waiting).ok());
  EXPECT_EQ(released_.back().gate.live_workers_size(), 2);
}

// A worker reports a clock while its push of the clock before is still on
// its way (the gate call and the push go out together): if it dies then,
// its replacement starts where its pushes were known to have landed, and
// the table goes back there, so that the push is made again.
TEST_F(JobCoordinatorTest, AReplacementRepeatsTheClocksWhosePushesWereNotKnownToLand) {
  SchedulerPolicy policy;
  policy.on_worker_failure = WorkerFailure::kWait;
  Start(TwoByTwo(), policy);
  JoinAll();
  bool parked = false;
  for (int64_t clock = 1; clock <= 3; ++clock) {
    for (int w = 0; w < 2; ++w) ASSERT_TRUE(Gate(w, clock, &parked, 0, 1, clock - 2).ok());
  }
  ASSERT_TRUE(Gate(0, 4, &parked, 0, 1, 2).ok());
  ASSERT_TRUE(parked);
  const Ticket waiting = ticket_;
  EXPECT_EQ(Released().count(waiting), 0u);
  // Worker 1 said it finished 3 clocks, the pushes of the first 1 known.
  now_ += absl::Seconds(6);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(Beat(SERVER, i).ok());
  ASSERT_TRUE(Beat(WORKER, 0).ok());
  coordinator_->Tick(now_);  // worker 1 dies; its place is kept
  const absl::StatusOr<RegisterResponse> joined = Join(WORKER, "w1b", /*incarnation=*/2, 1);
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->start_clock(), 1);
  EXPECT_EQ(coordinator_->Status(now_).worker_clocks(1), 1);
  // It goes through clocks 1 and 2 again; worker 0's gate opens at 4.
  for (int64_t clock = 2; clock <= 3; ++clock) {
    ASSERT_TRUE(Gate(1, clock, &parked, 0, 2, clock - 1).ok()) << clock;
    EXPECT_TRUE(Released().empty());
  }
  ASSERT_TRUE(Gate(1, 4, &parked, 0, 2, 3).ok());
  EXPECT_EQ(Released().count(waiting), 1u);
}

TEST_F(JobCoordinatorTest, AResumedJobStartsEveryMemberAtTheManifestClock) {
  SchedulerPolicy policy;
  policy.start_clock = 30;
  Start(TwoByTwo(/*checkpoint_every=*/10), policy);
  EXPECT_EQ(coordinator_->Status(now_).start_clock(), 30);
  const absl::StatusOr<RegisterResponse> server = Join(SERVER, "s0");
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(server->start_clock(), 30);
  const absl::StatusOr<RegisterResponse> worker = Join(WORKER, "w0");
  ASSERT_TRUE(worker.ok()) << worker.status();
  EXPECT_EQ(worker->start_clock(), 30);
}

TEST_F(JobCoordinatorTest, ARollbackGoesToTheNewestCompleteSetAndEndsWhenEveryServerRestored) {
  Start(TwoByTwo(/*checkpoint_every=*/10), {});
  catalog_.complete = {10, 20, 30};
  JoinAll();
  bool parked = false;
  // Worker 0 reaches clock 25, worker 1 clock 24 (BSP lets 0 one ahead).
  for (int64_t c = 1; c <= 24; ++c) {
    ASSERT_TRUE(Gate(0, c, &parked).ok());
    ASSERT_TRUE(Gate(1, c, &parked).ok());
  }
  ASSERT_TRUE(Gate(0, 25, &parked).ok());
  ASSERT_TRUE(parked);
  // Server 1 is replaced on purpose: generation 1, back to 20 (30 is past
  // the furthest worker's clock).
  const absl::StatusOr<RegisterResponse> joined = Join(SERVER, "s1b", 2, 1);
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->generation(), 1);
  EXPECT_EQ(joined->start_clock(), 20);
  ClusterStatus st = coordinator_->Status(now_);
  ASSERT_EQ(st.rollbacks_size(), 1);
  EXPECT_EQ(st.rollbacks(0).from_clock(), 25);
  EXPECT_EQ(st.rollbacks(0).to_clock(), 20);
  // Workers of generation 0 wait until every server has restored it.
  ASSERT_TRUE(Gate(1, 25, &parked, /*generation=*/0).ok());
  ASSERT_TRUE(parked);
  const Ticket stale = ticket_;
  ASSERT_TRUE(Beat(SERVER, 0, RUNNING, 1).ok());
  EXPECT_EQ(Released().count(stale), 0u);
  ASSERT_TRUE(Beat(SERVER, 1, RUNNING, 1, /*incarnation=*/2).ok());
  const std::map<Ticket, absl::Status> r = Released();
  ASSERT_EQ(r.count(stale), 1u);
  EXPECT_TRUE(r.at(stale).ok());
  const AdvanceClockResponse& answer = released_.back().gate;
  EXPECT_EQ(answer.generation(), 1);
  EXPECT_EQ(answer.resume_clock(), 20);
  EXPECT_GT(coordinator_->Status(now_).rollbacks(0).done_unix_ms(), 0);
}

// A replacement that cannot redo a clock as its predecessor made it (its
// push reached some chunks that applied it, not others) says so at the
// gate: with checkpoints the cluster rolls back to the newest complete set
// and the call is answered in the new generation once the servers restored
// it; without, the answer is as ever.
TEST_F(JobCoordinatorTest, ARedoThatCannotBeExactRollsBackToACheckpoint) {
  for (const bool checkpoints : {true, false}) {
    SCOPED_TRACE(checkpoints ? "with checkpoints" : "without");
    Start(TwoByTwo(/*checkpoint_every=*/checkpoints ? 10 : 0), {});
    catalog_.complete = {10};
    JoinAll();
    bool parked = false;
    for (int64_t c = 1; c <= 14; ++c) {
      ASSERT_TRUE(Gate(0, c, &parked).ok());
      ASSERT_TRUE(Gate(1, c, &parked).ok());
    }
    AdvanceClockRequest redo;
    redo.set_worker_id(1);
    redo.set_clock(14);
    redo.set_incarnation(1);
    redo.set_pushed_clock(13);
    redo.set_redo_inexact(true);
    AdvanceClockResponse answer;
    ASSERT_TRUE(coordinator_->AdvanceClock(redo, ++ticket_, now_, &answer, &parked).ok());
    const ClusterStatus st = coordinator_->Status(now_);
    if (!checkpoints) {
      EXPECT_EQ(st.rollbacks_size(), 0);
      EXPECT_FALSE(parked);
      EXPECT_EQ(answer.generation(), 0);
      continue;
    }
    ASSERT_EQ(st.rollbacks_size(), 1);
    EXPECT_EQ(st.rollbacks(0).to_clock(), 10);
    EXPECT_TRUE(st.rollbacks(0).redo()) << st.rollbacks(0).reason();
    ASSERT_TRUE(parked);  // until every server restored generation 1
    const Ticket held = ticket_;
    for (int s = 0; s < 2; ++s) ASSERT_TRUE(Beat(SERVER, s, RUNNING, 1).ok());
    const std::map<Ticket, absl::Status> r = Released();
    ASSERT_EQ(r.count(held), 1u);
    EXPECT_EQ(released_.back().gate.generation(), 1);
    EXPECT_EQ(released_.back().gate.resume_clock(), 10);
  }
}

TEST_F(JobCoordinatorTest, TheReplacementTimeoutAbortsTheJob) {
  Start(TwoByTwo(/*checkpoint_every=*/10), {});
  JoinAll();
  now_ += absl::Seconds(6);
  ASSERT_TRUE(Beat(SERVER, 0).ok());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(Beat(WORKER, i).ok());
  coordinator_->Tick(now_);  // server 1 dies: a rollback waits for a replacement
  EXPECT_EQ(coordinator_->state(), RUNNING_JOB);
  for (int s = 0; s < 6; ++s) {
    now_ += absl::Seconds(10);
    ASSERT_TRUE(Beat(SERVER, 0, RUNNING, 1).ok());
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(Beat(WORKER, i).ok());
    coordinator_->Tick(now_);
  }
  EXPECT_EQ(coordinator_->state(), RUNNING_JOB);  // 60 s: not yet
  now_ += absl::Seconds(1);
  coordinator_->Tick(now_);
  std::string message;
  EXPECT_EQ(coordinator_->state(&message), ABORTED);
  EXPECT_NE(message.find("server 1 died and neither came back nor was replaced"), std::string::npos)
      << message;
}

TEST_F(JobCoordinatorTest, RegisteringTwiceGivesTheSameIdAndOneTooManyIsRefused) {
  Start(TwoByTwo(), {});
  const absl::StatusOr<RegisterResponse> a = Join(WORKER, "w0");
  const absl::StatusOr<RegisterResponse> again = Join(WORKER, "w0");
  ASSERT_TRUE(a.ok() && again.ok());
  EXPECT_EQ(a->id(), again->id());
  ASSERT_TRUE(Join(WORKER, "w1").ok());
  const absl::StatusOr<RegisterResponse> third = Join(WORKER, "w2");
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted) << third.status();
  EXPECT_EQ(coordinator_->state(), WAITING);  // the servers have not come
}

// A registration naming a member's id while that member may be live is
// probed first (the service asks its address); asked to replace_live, or
// for a dead member, or a retry of the member's own, it is not; the
// refusal names the flag that takes the place anyway.
TEST_F(JobCoordinatorTest, ARegistrationNamingALiveMembersIdIsProbedFirst) {
  Start(TwoByTwo(), {});
  JoinAll();
  RegisterRequest req;
  req.set_role(SERVER);
  req.set_id(1);
  req.set_address("s9");
  req.set_incarnation(9);
  EXPECT_EQ(coordinator_->LiveHolder(req), std::optional<std::string>("s1"));
  const absl::Status refused = coordinator_->RefuseLive(req, now_);
  EXPECT_EQ(refused.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(refused.message().find("--replace_live"), absl::string_view::npos) << refused;
  req.set_replace_live(true);
  EXPECT_EQ(coordinator_->LiveHolder(req), std::nullopt);
  req.set_replace_live(false);
  RegisterRequest retry = req;
  retry.set_address("s1");
  retry.set_incarnation(1);
  EXPECT_EQ(coordinator_->LiveHolder(retry), std::nullopt);
  // A new process on the old one's address (a restart in place, as systemd
  // or a StatefulSet does it): the old one is gone, no probe.
  retry.set_incarnation(2);
  EXPECT_EQ(coordinator_->LiveHolder(retry), std::nullopt);
  RegisterRequest any = req;
  any.clear_id();
  EXPECT_EQ(coordinator_->LiveHolder(any), std::nullopt);
  // Server 1 goes silent and is declared dead: its id is free to take.
  now_ += absl::Seconds(6);
  ASSERT_TRUE(Beat(SERVER, 0).ok());
  for (int w = 0; w < 2; ++w) ASSERT_TRUE(Beat(WORKER, w).ok());
  coordinator_->Tick(now_);
  EXPECT_EQ(coordinator_->LiveHolder(req), std::nullopt);
}

TEST_F(JobCoordinatorTest, TheJobIsDoneWhenEveryLiveWorkerFinished) {
  Start(TwoByTwo(), {});
  JoinAll();
  ASSERT_TRUE(Beat(WORKER, 0, FINISHED).ok());
  EXPECT_EQ(coordinator_->state(), RUNNING_JOB);
  // A later heartbeat cannot bring a finished worker back.
  ASSERT_TRUE(Beat(WORKER, 0, RUNNING).ok());
  EXPECT_EQ(coordinator_->Status(now_).members(2).state(), FINISHED);
  ASSERT_TRUE(Beat(WORKER, 1, FINISHED).ok());
  EXPECT_EQ(coordinator_->state(), DONE);
  // The end waits for every member's last state: a server that heard of
  // the end but has not reported its own is not ended yet.
  EXPECT_FALSE(coordinator_->MembersEnded(now_, absl::Seconds(5)));
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(Beat(SERVER, i).ok());
  EXPECT_FALSE(coordinator_->MembersEnded(now_, absl::Seconds(5)));
  ASSERT_TRUE(Beat(SERVER, 0, FINISHED).ok());
  ASSERT_TRUE(Beat(SERVER, 1, FAILED).ok());  // a failure after the end changes nothing
  EXPECT_TRUE(coordinator_->MembersEnded(now_, absl::Seconds(5)));
  EXPECT_EQ(coordinator_->state(), DONE);
  const ClusterStatus st = coordinator_->Status(now_);
  EXPECT_EQ(st.members(0).state(), FINISHED);
  EXPECT_EQ(st.members(1).state(), FAILED);
}

// A member that never reports its end but is still heard from holds the
// final status for the grace at most; one that went silent (killed as the
// job reached its end) holds it until it is declared dead, and the final
// status says so.
TEST_F(JobCoordinatorTest, TheEndWaitsForLastStatesWithinTheGraceAndDeclaresTheSilentDead) {
  Start(TwoByTwo(), {});
  JoinAll();
  const absl::Time end = now_;
  for (int w = 0; w < 2; ++w) ASSERT_TRUE(Beat(WORKER, w, FINISHED).ok());
  ASSERT_EQ(coordinator_->state(), DONE);
  now_ = end + absl::Seconds(3);
  ASSERT_TRUE(Beat(SERVER, 0).ok());  // server 1 is silent from the end on
  coordinator_->Tick(now_);
  EXPECT_FALSE(coordinator_->MembersEnded(now_, absl::Seconds(2)));
  now_ = end + absl::Seconds(4);
  ASSERT_TRUE(Beat(SERVER, 0).ok());  // lingers: heard after the grace
  coordinator_->Tick(now_);
  EXPECT_FALSE(coordinator_->MembersEnded(now_, absl::Seconds(2)))
      << "server 1 is silent, not yet declared dead";
  now_ = end + absl::Seconds(5) + absl::Milliseconds(100);  // past the 5 s timeout
  ASSERT_TRUE(Beat(SERVER, 0).ok());
  coordinator_->Tick(now_);
  EXPECT_TRUE(coordinator_->MembersEnded(now_, absl::Seconds(2)));
  EXPECT_EQ(coordinator_->state(), DONE);
  const ClusterStatus st = coordinator_->Status(now_);
  EXPECT_EQ(st.members(0).state(), RUNNING);
  EXPECT_EQ(st.members(1).state(), DEAD);
  EXPECT_EQ(st.members(1).declared_dead_unix_ms(), absl::ToUnixMillis(now_));
}

TEST_F(JobCoordinatorTest, TheGateTracesClocksAndStartsInOrder) {
  Start(TwoByTwo(), {});
  JoinAll();
  bool parked = false;
  ASSERT_TRUE(Gate(0, 0, &parked).ok());
  ASSERT_TRUE(Gate(0, 1, &parked).ok());
  ASSERT_TRUE(parked);
  ASSERT_TRUE(Gate(1, 1, &parked).ok());  // worker 1 finishes clock 0: both go
  std::vector<std::string> events;
  for (const TraceEvent& e : trace_) {
    events.push_back(e.event() + std::to_string(e.worker()) + ":" + std::to_string(e.clock()));
  }
  EXPECT_EQ(events,
            (std::vector<std::string>{"start0:0", "clock0:1", "clock1:1", "start0:1", "start1:1"}));
  EXPECT_EQ(Released().size(), 1u);
}

}  // namespace
}  // namespace coordinator_testing
}  // namespace pstrain
