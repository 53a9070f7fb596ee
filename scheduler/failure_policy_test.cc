// FailurePolicy: what a member's death, failure, replacement or return does
// under each policy, with a fake clock. The decision is the assertion.
#include "scheduler/failure_policy.h"

#include "common/job_spec.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

JobSpec Job(int workers, int stages, int64_t checkpoint_every) {
  JobSpec job;
  job.mutable_data()->set_dataset(SYNTHETIC);
  job.set_num_servers(2);
  job.set_num_workers(workers);
  job.set_pipeline_stages(stages);
  job.set_batch_size(8);
  job.set_clocks(100);
  if (checkpoint_every > 0) {
    job.set_checkpoint_every(checkpoint_every);
    job.set_checkpoint_dir("/ckpt");
  }
  ApplyJobDefaults(&job);
  return job;
}

class FailurePolicyTest : public ::testing::Test {
 protected:
  // Every member registered at now_; the job RUNNING_JOB.
  void Start(const JobSpec& job, WorkerFailure on_worker_failure) {
    SchedulerPolicy policy;
    policy.on_worker_failure = on_worker_failure;
    policy.heartbeat_timeout = absl::Seconds(5);
    policy.replacement_timeout = absl::Seconds(60);
    members_ = std::make_unique<Membership>(job.num_servers(), job.num_workers());
    clocks_ = std::make_unique<ClockTable>(job.num_workers(), 0);
    pipelines_ = std::make_unique<PipelineRestarts>(job.num_workers(), job.pipeline_stages());
    failures_ = std::make_unique<FailurePolicy>(job, policy, members_.get(), clocks_.get());
    for (int s = 0; s < job.num_servers(); ++s) {
      ASSERT_TRUE(members_->Register(SERVER, "s" + std::to_string(s), 1, now_).ok());
    }
    for (int w = 0; w < job.num_workers(); ++w) {
      ASSERT_TRUE(members_->Register(WORKER, "w" + std::to_string(w), 1, now_).ok());
    }
  }
  // `role` `id` goes silent past the heartbeat timeout.
  Decision Dies(Role role, int id) {
    MemberRecord& m = *members_->Get(role, id);
    m.last_seen = now_ - absl::Seconds(6);
    EXPECT_TRUE(failures_->Silent(m, now_));
    return failures_->DeclareDead(m, RUNNING_JOB, now_);
  }

  absl::Time now_ = absl::FromUnixSeconds(1000);
  std::unique_ptr<Membership> members_;
  std::unique_ptr<ClockTable> clocks_;
  std::unique_ptr<PipelineRestarts> pipelines_;
  std::unique_ptr<FailurePolicy> failures_;
};

TEST_F(FailurePolicyTest, OnlySilencePastTheTimeoutIsDeath) {
  Start(Job(2, 1, 0), WorkerFailure::kShrink);
  MemberRecord& m = *members_->Get(WORKER, 1);
  m.last_seen = now_ - absl::Seconds(5);
  EXPECT_FALSE(failures_->Silent(m, now_));
  m.last_seen -= absl::Milliseconds(1);
  EXPECT_TRUE(failures_->Silent(m, now_));
  m.state = FINISHED;
  EXPECT_FALSE(failures_->Silent(m, now_));  // gone already
}

TEST_F(FailurePolicyTest, UnderShrinkTheJobGoesOnWithoutADeadWorker) {
  Start(Job(2, 1, 0), WorkerFailure::kShrink);
  const Decision d = Dies(WORKER, 1);
  EXPECT_EQ(d.kind, Decision::kGoOn);
  EXPECT_TRUE(clocks_->removed(1));
  EXPECT_EQ(std::vector<int>(failures_->dead_workers().begin(), failures_->dead_workers().end()),
            std::vector<int>({1}));
  EXPECT_EQ(failures_->deaths(), 1);
  const MemberRecord& m = *members_->Get(WORKER, 1);
  EXPECT_EQ(m.state, DEAD);
  EXPECT_EQ(m.status.message(), "no heartbeat for 6s (--heartbeat_timeout_ms=5000)");
  EXPECT_EQ(m.status.declared_dead_unix_ms(), absl::ToUnixMillis(now_));
  // The last one: nobody left to go on with.
  const Decision last = Dies(WORKER, 0);
  EXPECT_EQ(last.kind, Decision::kAbort);
  EXPECT_EQ(last.why,
            "worker 0 at w0 declared dead: no heartbeat for 6s (--heartbeat_timeout_ms=5000)");
}

TEST_F(FailurePolicyTest, UnderAbortADeadWorkerEndsTheJob) {
  Start(Job(2, 1, 0), WorkerFailure::kAbort);
  EXPECT_EQ(Dies(WORKER, 0).kind, Decision::kAbort);
  EXPECT_FALSE(clocks_->removed(0));
}

TEST_F(FailurePolicyTest, UnderWaitADeadWorkerKeepsItsPlaceUntilTheTimeout) {
  Start(Job(2, 1, 0), WorkerFailure::kWait);
  EXPECT_EQ(Dies(WORKER, 1).kind, Decision::kNone);
  EXPECT_FALSE(clocks_->removed(1));
  const auto at_gate = [](int) { return false; };
  now_ += absl::Seconds(60);
  EXPECT_EQ(failures_->CheckTimeouts(RUNNING_JOB, *pipelines_, at_gate, now_).kind,
            Decision::kNone);
  now_ += absl::Seconds(1);
  const Decision d = failures_->CheckTimeouts(RUNNING_JOB, *pipelines_, at_gate, now_);
  EXPECT_EQ(d.kind, Decision::kAbort);
  EXPECT_EQ(d.why,
            "worker 1 died and neither came back nor was replaced within 1m (start one with "
            "ps_worker --id=1)");
}

TEST_F(FailurePolicyTest, UnderWaitADeadWorkerComesBack) {
  Start(Job(2, 1, 0), WorkerFailure::kWait);
  Dies(WORKER, 1);
  MemberRecord& m = *members_->Get(WORKER, 1);
  EXPECT_FALSE(failures_->MaybeRevive(m, DONE, now_));  // only while running
  EXPECT_TRUE(failures_->MaybeRevive(m, RUNNING_JOB, now_));
  EXPECT_EQ(m.state, RUNNING);
  EXPECT_FALSE(failures_->MaybeRevive(m, RUNNING_JOB, now_));  // once
}

TEST_F(FailurePolicyTest, WithStagesADeadStageRestartsItsReplicaUnderWait) {
  Start(Job(4, 2, 0), WorkerFailure::kWait);
  const Decision d = Dies(WORKER, 3);
  EXPECT_EQ(d.kind, Decision::kRestartReplica);
  EXPECT_EQ(d.replica, 1);
  EXPECT_EQ(d.why, "worker 3 declared dead: no heartbeat for 6s (--heartbeat_timeout_ms=5000)");
  EXPECT_EQ(failures_->LinksBroke(0, 0)->kind, Decision::kRestartReplica);
}

TEST_F(FailurePolicyTest, WithStagesADeadStageTakesItsReplicaOutUnderShrink) {
  Start(Job(4, 2, 0), WorkerFailure::kShrink);
  members_->Get(WORKER, 0)->state = FINISHED;
  EXPECT_EQ(Dies(WORKER, 1).kind, Decision::kGoOn);
  EXPECT_TRUE(clocks_->removed(0));
  EXPECT_TRUE(clocks_->removed(1));
  EXPECT_EQ(members_->Get(WORKER, 0)->state, FINISHED);  // a finished stage stays so
  EXPECT_FALSE(clocks_->removed(2));
  EXPECT_TRUE(absl::IsFailedPrecondition(failures_->LinksBroke(2, 1).status()));
  // A stage of the last replica reports FAILED: every replica is out.
  MemberRecord& w2 = *members_->Get(WORKER, 2);
  w2.state = FAILED;
  w2.status.set_message("out of memory");
  const Decision d = failures_->Failed(w2, RUNNING_JOB, now_);
  EXPECT_EQ(d.kind, Decision::kAbort);
  EXPECT_EQ(d.why, "every replica is out; the last: worker 2 failed: out of memory");
  EXPECT_EQ(members_->Get(WORKER, 3)->state, DEAD);
}

TEST_F(FailurePolicyTest, AFailedWorkerWithoutStagesEndsTheJob) {
  Start(Job(2, 1, 0), WorkerFailure::kShrink);
  MemberRecord& w = *members_->Get(WORKER, 0);
  w.status.set_message("bad data");
  const Decision d = failures_->Failed(w, RUNNING_JOB, now_);
  EXPECT_EQ(d.kind, Decision::kAbort);
  EXPECT_EQ(d.why, "worker 0 failed: bad data");
}

TEST_F(FailurePolicyTest, ADeadServerRollsBackWithCheckpointsAndEndsTheJobWithout) {
  Start(Job(2, 1, 10), WorkerFailure::kShrink);
  Decision d = Dies(SERVER, 1);
  EXPECT_EQ(d.kind, Decision::kRollback);
  EXPECT_EQ(d.why,
            "server 1 at s1 declared dead: no heartbeat for 6s (--heartbeat_timeout_ms=5000)");
  Start(Job(2, 1, 0), WorkerFailure::kShrink);
  EXPECT_EQ(Dies(SERVER, 1).kind, Decision::kAbort);
}

TEST_F(FailurePolicyTest, AReplacementTakesAKeptPlace) {
  Start(Job(2, 1, 10), WorkerFailure::kShrink);
  // A retry of the same process: nothing happens.
  EXPECT_EQ(failures_->Replace(SERVER, 0, "s0", 1, RUNNING_JOB, now_)->kind, Decision::kNone);
  // A live server replaced: its state is lost, the cluster rolls back.
  const absl::StatusOr<Decision> d = failures_->Replace(SERVER, 0, "s9", 2, RUNNING_JOB, now_);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->kind, Decision::kRollback);
  EXPECT_EQ(d->why, "server 0 at s0 replaced by s9");
  EXPECT_EQ(members_->Get(SERVER, 0)->address, "s9");
  // A dead server's replacement: its death began the rollback already.
  Dies(SERVER, 1);
  EXPECT_EQ(failures_->Replace(SERVER, 1, "s8", 2, RUNNING_JOB, now_)->kind, Decision::kNone);
  // Under shrink a worker's place is not kept.
  EXPECT_TRUE(absl::IsFailedPrecondition(
      failures_->Replace(WORKER, 0, "w9", 2, RUNNING_JOB, now_).status()));
}

TEST_F(FailurePolicyTest, AReplacedServerWithoutCheckpointsEndsTheJob) {
  Start(Job(2, 1, 0), WorkerFailure::kShrink);
  const absl::StatusOr<Decision> d = failures_->Replace(SERVER, 0, "s9", 2, RUNNING_JOB, now_);
  EXPECT_EQ(d->kind, Decision::kAbort);
}

TEST_F(FailurePolicyTest, AReplacedStageRestartsItsReplicaAndAFinishedWorkerStays) {
  Start(Job(4, 2, 0), WorkerFailure::kWait);
  const absl::StatusOr<Decision> d = failures_->Replace(WORKER, 2, "w9", 2, RUNNING_JOB, now_);
  EXPECT_EQ(d->kind, Decision::kRestartReplica);
  EXPECT_EQ(d->replica, 1);
  members_->Get(WORKER, 0)->state = FINISHED;
  EXPECT_TRUE(absl::IsFailedPrecondition(
      failures_->Replace(WORKER, 0, "w8", 2, RUNNING_JOB, now_).status()));
}

TEST_F(FailurePolicyTest, RestoreChecksTheWorkers) {
  Start(Job(2, 1, 0), WorkerFailure::kShrink);
  FailureState state;
  state.add_dead_workers(1);
  state.set_deaths(3);
  ASSERT_TRUE(failures_->Restore(state).ok());
  EXPECT_EQ(failures_->deaths(), 3);
  state.add_dead_workers(2);
  EXPECT_TRUE(absl::IsInvalidArgument(failures_->Restore(state)));
  EXPECT_EQ(failures_->dead_workers().size(), 1);
}

}  // namespace
}  // namespace pstrain
