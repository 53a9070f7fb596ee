// JobCoordinator's rules for pipeline replicas (job_coordinator_fixture.h,
// a fake clock and a fake checkpoint catalog): a dead stage worker under
// shrink takes its replica out of the gate; under wait the replica's
// stages restart together at its slowest clock, and a broken link restarts
// it (only under wait). The other rules: job_coordinator_test.cc.
#include <string>
#include <vector>

#include "scheduler/job_coordinator_fixture.h"

namespace pstrain {
namespace coordinator_testing {
namespace {

// Two replicas of two pipeline stages (workers 0, 1 and 2, 3) under shrink.
TEST_F(JobCoordinatorTest, UnderShrinkADeadStageWorkerTakesItsReplicaOut) {
  JobSpec job = TwoByTwo();
  job.set_num_workers(4);
  job.set_pipeline_stages(2);
  ASSERT_TRUE(ValidateJobSpec(job).ok()) << ValidateJobSpec(job);
  Start(job, {});
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(Join(SERVER, "s" + std::to_string(i)).ok());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Join(WORKER, "w" + std::to_string(i)).ok());
  ASSERT_EQ(coordinator_->state(), RUNNING_JOB);
  bool parked = false;
  for (int w = 0; w < 4; ++w) ASSERT_TRUE(Gate(w, 0, &parked).ok());
  ASSERT_TRUE(Gate(2, 1, &parked).ok());
  ASSERT_TRUE(parked);  // BSP: waits for replica 0
  ASSERT_TRUE(Gate(3, 1, &parked).ok());
  ASSERT_TRUE(parked);
  const Ticket waiting = ticket_;
  // Worker 1 (stage 1 of replica 0) goes silent; the others beat.
  now_ += absl::Seconds(6);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(Beat(SERVER, i).ok());
  for (int w : {0, 2, 3}) ASSERT_TRUE(Beat(WORKER, w).ok());
  coordinator_->Tick(now_);
  const std::map<Ticket, absl::Status> r = Released();
  ASSERT_EQ(r.count(waiting), 1u);
  EXPECT_TRUE(r.at(waiting).ok());
  // Replica 0 (workers 0 and 1) is out; replica 1 goes on.
  EXPECT_EQ(released_.back().gate.live_workers_size(), 2);
  const ClusterStatus st = coordinator_->Status(now_);
  EXPECT_EQ(st.members(2).state(), DEAD);  // servers first: worker 0
  EXPECT_EQ(st.members(3).state(), DEAD);  // worker 1
  EXPECT_EQ(st.members(4).state(), RUNNING);
  EXPECT_EQ(Beat(SERVER, 0)->dead_workers_size(), 2);
  // Worker 0's link to the dead stage broke: its failure report ends
  // nothing more.
  ASSERT_TRUE(Beat(WORKER, 0, FAILED).ok());
  EXPECT_EQ(coordinator_->state(), RUNNING_JOB);
  // Replica 1 failing too leaves no replica: the job ends.
  ASSERT_TRUE(Beat(WORKER, 3, FAILED).ok());
  EXPECT_EQ(coordinator_->state(), ABORTED);
}

JobSpec TwoReplicasOfTwoStages() {
  JobSpec job = TwoByTwo();
  job.set_num_workers(4);
  job.set_pipeline_stages(2);
  return job;
}

// Under wait, worker 1 (stage 1 of replica 0) dies in clock 0 while worker
// 0 (stage 0) finished it: the replica restarts clock 0 once a replacement
// and worker 0 are at the gate, in link generation 1; replica 1 is untouched.
TEST_F(JobCoordinatorTest, UnderWaitAReplicaRestartsAtItsSlowestClockOnceEveryStageIsBack) {
  const JobSpec job = TwoReplicasOfTwoStages();
  ASSERT_TRUE(ValidateJobSpec(job).ok()) << ValidateJobSpec(job);
  SchedulerPolicy policy;
  policy.on_worker_failure = WorkerFailure::kWait;
  Start(job, policy);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(Join(SERVER, "s" + std::to_string(i)).ok());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Join(WORKER, "w" + std::to_string(i)).ok());
  bool parked = false;
  for (int w = 0; w < 4; ++w) ASSERT_TRUE(StageGate(w, 0, 0, false, &parked).ok());
  EXPECT_EQ(last_response_.link_generation(), 0);
  for (int w : {0, 2, 3}) {
    ASSERT_TRUE(StageGate(w, 1, 0, false, &parked).ok());
    ASSERT_TRUE(parked);  // BSP: worker 1 is at clock 0
  }
  const Ticket worker0 = ticket_ - 2;
  now_ += absl::Seconds(6);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(Beat(SERVER, i).ok());
  for (int w : {0, 2, 3}) ASSERT_TRUE(Beat(WORKER, w).ok());
  coordinator_->Tick(now_);  // worker 1 declared dead: replica 0 restarts
  EXPECT_EQ(Beat(WORKER, 0)->link_generation(), 1);
  EXPECT_EQ(Beat(WORKER, 2)->link_generation(), 0);
  EXPECT_TRUE(Released().empty());
  ClusterStatus st = coordinator_->Status(now_);
  ASSERT_EQ(st.pipeline_restarts_size(), 1);
  EXPECT_EQ(st.pipeline_restarts(0).replica(), 0);
  EXPECT_EQ(st.pipeline_restarts(0).done_unix_ms(), 0);
  // The replacement takes id 1 at its clock, 0, and comes to the gate in
  // no link generation yet: now every stage of replica 0 is there.
  const absl::StatusOr<RegisterResponse> joined = Join(WORKER, "w1b", /*incarnation=*/2, 1);
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->start_clock(), 0);
  ASSERT_TRUE(StageGate(1, 0, 0, false, &parked, /*incarnation=*/2).ok());
  const std::map<Ticket, absl::Status> r = Released();
  ASSERT_EQ(r.size(), 2u);  // workers 0 and 1
  for (const Release& rel : released_) {
    EXPECT_EQ(rel.gate.link_generation(), 1);
    EXPECT_EQ(rel.gate.resume_clock(), 0);  // worker 0 goes back a clock
  }
  EXPECT_EQ(r.count(worker0), 1u);
  st = coordinator_->Status(now_);
  EXPECT_EQ(st.pipeline_restarts(0).clock(), 0);
  EXPECT_NE(st.pipeline_restarts(0).done_unix_ms(), 0);
  // Both redo clock 0 in link generation 1; then the BSP gate of clock 1 opens for all.
  ASSERT_TRUE(StageGate(0, 0, 1, false, &parked).ok());
  EXPECT_FALSE(parked);
  ASSERT_TRUE(StageGate(1, 0, 1, false, &parked, 2).ok());
  ASSERT_TRUE(StageGate(0, 1, 1, false, &parked).ok());
  ASSERT_TRUE(parked);
  ASSERT_TRUE(StageGate(1, 1, 1, false, &parked, 2).ok());
  EXPECT_FALSE(parked);
  EXPECT_EQ(Released().size(), 3u);  // workers 0, 2 and 3
}

// A stage whose links broke asks for a restart: under wait its replica
// restarts (the neighbour learns it from heartbeats); otherwise refused.
TEST_F(JobCoordinatorTest, ABrokenLinkRestartsTheReplicaOnlyUnderWait) {
  Start(TwoReplicasOfTwoStages(), {});  // shrink
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(Join(SERVER, "s" + std::to_string(i)).ok());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Join(WORKER, "w" + std::to_string(i)).ok());
  bool parked = false;
  for (int w = 0; w < 4; ++w) ASSERT_TRUE(StageGate(w, 0, 0, false, &parked).ok());
  EXPECT_EQ(StageGate(3, 0, 0, true, &parked).code(), absl::StatusCode::kFailedPrecondition);

  SchedulerPolicy policy;
  policy.on_worker_failure = WorkerFailure::kWait;
  Start(TwoReplicasOfTwoStages(), policy);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(Join(SERVER, "s" + std::to_string(i)).ok());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Join(WORKER, "w" + std::to_string(i)).ok());
  for (int w = 0; w < 4; ++w) ASSERT_TRUE(StageGate(w, 0, 0, false, &parked).ok());
  ASSERT_TRUE(StageGate(3, 0, 0, true, &parked).ok());
  ASSERT_TRUE(parked);
  EXPECT_EQ(Beat(WORKER, 2)->link_generation(), 1);
  // A second broken link of the same restart begins no other.
  ASSERT_TRUE(StageGate(2, 0, 0, true, &parked).ok());
  const std::map<Ticket, absl::Status> r = Released();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(released_.back().gate.link_generation(), 1);
  EXPECT_EQ(coordinator_->Status(now_).pipeline_restarts_size(), 1);
  // A stage that never comes back to the gate ends the job after the
  // replacement timeout, naming it.
  ASSERT_TRUE(StageGate(1, 0, 0, true, &parked).ok());
  ASSERT_TRUE(parked);
  now_ += absl::Seconds(61);
  AllBeat();
  for (int w : {2, 3}) ASSERT_TRUE(Beat(WORKER, w).ok());
  coordinator_->Tick(now_);
  std::string message;
  EXPECT_EQ(coordinator_->state(&message), ABORTED);
  EXPECT_NE(message.find("worker 0 (stage 0) at the gate"), std::string::npos) << message;
}

}  // namespace
}  // namespace coordinator_testing
}  // namespace pstrain
