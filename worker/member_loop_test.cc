// The worker's reactions to the scheduler's news against fake actions: the
// expected call log is the assertion. Gate answers (WorkerMemberLoop): the
// first answer connects, a newer generation resumes at its clock with new
// clients, a stage's newer link generation relinks, a drain moves the end, the
// push context follows the answers, the batch is split among the live
// replicas. Heartbeats' news (WorkerWatch): a restart interrupts a stage's
// links, a signal or the job's abort stops the worker once.
#include "worker/member_loop.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using CallLog = std::vector<std::string>;

class FakeLoop : public LoopActions {
 public:
  CallLog calls;
  void ResumeAt(int64_t clock) override { calls.push_back(absl::StrCat("resume ", clock)); }
  absl::Status Connect(const ClusterMembers& cluster) override {
    calls.push_back(absl::StrCat("connect ", cluster.servers_size(), " servers"));
    return absl::OkStatus();
  }
  absl::Status Relink(const ClusterMembers&, int64_t link_generation) override {
    calls.push_back(absl::StrCat("relink ", link_generation));
    return absl::OkStatus();
  }
  void SetPushContext(const PushContext& c) override {
    std::vector<std::string> at_once;
    for (const auto& [clock, yes] : c.at_once) {
      at_once.push_back(absl::StrCat(clock, yes ? "+" : "-"));
    }
    calls.push_back(
        absl::StrCat("context ckpt ", c.checkpoint_clock, " [", absl::StrJoin(at_once, ","), "]"));
  }
};

JobSpec Job(int workers, Consistency consistency = BSP) {
  JobSpec job;
  job.set_num_servers(2);
  job.set_num_workers(workers);
  job.set_clocks(100);
  job.set_consistency(consistency);
  return job;
}

// A gate's answer of `generation`, resuming at `resume`, workers 0..n-1 live.
AdvanceClockResponse Answer(int64_t generation, int64_t resume, int live) {
  AdvanceClockResponse r;
  r.mutable_cluster()->add_servers()->set_address("s0");
  r.mutable_cluster()->add_servers()->set_address("s1");
  for (int w = 0; w < live; ++w) r.add_live_workers(w);
  r.set_generation(generation);
  r.set_resume_clock(resume);
  return r;
}

TEST(WorkerMemberLoopTest, TheFirstAnswerConnectsAndARollbackResumesWithNewClients) {
  const JobSpec job = Job(2);
  FakeLoop loop;
  WorkerMemberLoop member(job, 0, 1, /*generation=*/0, &loop);
  EXPECT_FALSE(*member.Adopt(Answer(0, 0, 2), /*clock=*/0, /*connected=*/false));
  EXPECT_FALSE(*member.Adopt(Answer(0, 1, 2), 1, /*connected=*/true));
  // Clock 7's answer: generation 1, back to the checkpoint of clock 5.
  EXPECT_TRUE(*member.Adopt(Answer(1, 5, 2), 7, true));
  EXPECT_EQ(member.generation(), 1);
  EXPECT_EQ(loop.calls, (CallLog{"connect 2 servers", "context ckpt 0 []",  //
                                 "context ckpt 0 []",                       //
                                 "resume 5", "connect 2 servers", "context ckpt 0 []"}))
      << absl::StrJoin(loop.calls, "\n");
}

TEST(WorkerMemberLoopTest, AStagesNewerLinkGenerationRelinksWhereItsReplicaRestarts) {
  const JobSpec job = Job(4);
  FakeLoop loop;
  WorkerMemberLoop member(job, /*replica=*/1, /*stages=*/2, 0, &loop);
  AdvanceClockResponse first = Answer(0, 0, 4);
  first.set_link_generation(3);  // linked in link generation 3 from the start: no restart
  EXPECT_FALSE(*member.Adopt(first, 0, /*connected=*/false));
  AdvanceClockResponse restart = Answer(0, 12, 4);
  restart.set_link_generation(4);
  EXPECT_TRUE(*member.Adopt(restart, 15, true));
  EXPECT_EQ(member.link_generation(), 4);
  EXPECT_EQ(loop.calls, (CallLog{"connect 2 servers", "context ckpt 0 []",  //
                                 "resume 12", "relink 4"}))
      << absl::StrJoin(loop.calls, "\n");
  // Without stages a link generation means nothing.
  FakeLoop alone_loop;
  WorkerMemberLoop alone(Job(2), 0, 1, 0, &alone_loop);
  ASSERT_TRUE(alone.Adopt(Answer(0, 0, 2), 0, false).ok());
  EXPECT_FALSE(*alone.Adopt(restart, 15, true));
}

TEST(WorkerMemberLoopTest, DrainsCheckpointsAndConsistencyChangesFollowTheAnswers) {
  const JobSpec job = Job(2);
  FakeLoop loop;
  WorkerMemberLoop member(job, 0, 1, 0, &loop);
  AdvanceClockResponse a = Answer(0, 0, 2);
  a.set_end_clock(60);  // psctl drain: the job ends at clock 60
  a.set_checkpoint_clock(40);
  ConsistencyChange* change = a.add_consistency_changes();
  change->set_clock(30);
  change->set_consistency(ASP);
  ASSERT_TRUE(member.Adopt(a, 20, false).ok());
  EXPECT_EQ(member.total(), 60);
  EXPECT_EQ(member.schedule().StalenessAt(30), -1);
  // An end before the loop's clock, and an older checkpoint ask, change nothing.
  a.set_end_clock(10);
  a.set_checkpoint_clock(20);
  ASSERT_TRUE(member.Adopt(a, 21, true).ok());
  EXPECT_EQ(member.total(), 60);
  EXPECT_EQ(loop.calls, (CallLog{"connect 2 servers", "context ckpt 40 [30+]",  //
                                 "context ckpt 40 [30+]"}))
      << absl::StrJoin(loop.calls, "\n");
}

TEST(WorkerMemberLoopTest, TheBatchIsSplitAmongTheLiveReplicas) {
  FakeLoop loop;
  int num_shares = 0, share_index = 0;
  // Before any answer: every replica of the job.
  WorkerMemberLoop w2(Job(4), 2, 1, 0, &loop);
  ASSERT_TRUE(w2.BatchShare(&num_shares, &share_index).ok());
  EXPECT_EQ(std::make_pair(num_shares, share_index), std::make_pair(4, 2));
  // Worker 1 died: worker 2 takes the second of three shares.
  AdvanceClockResponse a = Answer(0, 0, 0);
  for (int w : {0, 2, 3}) a.add_live_workers(w);
  ASSERT_TRUE(w2.Adopt(a, 0, false).ok());
  ASSERT_TRUE(w2.BatchShare(&num_shares, &share_index).ok());
  EXPECT_EQ(std::make_pair(num_shares, share_index), std::make_pair(3, 1));
  // Worker 1 itself is no longer live.
  WorkerMemberLoop w1(Job(4), 1, 1, 0, &loop);
  ASSERT_TRUE(w1.Adopt(a, 0, false).ok());
  EXPECT_EQ(w1.BatchShare(&num_shares, &share_index).code(), absl::StatusCode::kFailedPrecondition);
  // Pipelines of two stages: workers 2 and 3 are replica 1, the only live one.
  WorkerMemberLoop stage(Job(4), 1, 2, 0, &loop);
  AdvanceClockResponse b = Answer(0, 0, 0);
  for (int w : {2, 3}) b.add_live_workers(w);
  ASSERT_TRUE(stage.Adopt(b, 0, false).ok());
  ASSERT_TRUE(stage.BatchShare(&num_shares, &share_index).ok());
  EXPECT_EQ(std::make_pair(num_shares, share_index), std::make_pair(1, 0));
}

TEST(WorkerMemberLoopTest, OnlyABrokenOrCancelledLinkMayBeSavedByARestart) {
  EXPECT_TRUE(WorkerMemberLoop::MayRelink(absl::UnavailableError("x")));
  EXPECT_TRUE(WorkerMemberLoop::MayRelink(absl::AbortedError("x")));
  EXPECT_TRUE(WorkerMemberLoop::MayRelink(absl::DeadlineExceededError("x")));
  EXPECT_TRUE(WorkerMemberLoop::MayRelink(absl::CancelledError("x")));
  EXPECT_FALSE(WorkerMemberLoop::MayRelink(absl::InvalidArgumentError("x")));
  EXPECT_FALSE(WorkerMemberLoop::MayRelink(absl::ResourceExhaustedError("x")));
}

class FakeRuntime : public WatchActions {
 public:
  CallLog calls;
  void Stop() override { calls.push_back("stop"); }
  void InterruptLinks(int64_t link_generation) override {
    calls.push_back(absl::StrCat("interrupt ", link_generation));
  }
  void CancelLinks(const absl::Status& why) override {
    calls.push_back(absl::StrCat("cancel ", why.message()));
  }
};

TEST(WorkerWatchTest, ARestartInterruptsTheLinksAndAnAbortStopsOnce) {
  FakeRuntime runtime;
  WorkerWatch watch(&runtime);
  WorkerNews news;
  news.job_state = RUNNING_JOB;
  EXPECT_FALSE(watch.Step(news));
  news.link_generation = 2;  // the replica's pipeline restarts
  EXPECT_FALSE(watch.Step(news));
  news.job_state = ABORTED;
  EXPECT_TRUE(watch.Step(news));
  // Stopped already: nothing more.
  EXPECT_TRUE(watch.Step(news));
  EXPECT_EQ(runtime.calls, (CallLog{"interrupt 0", "interrupt 2",  //
                                    "stop", "cancel the worker stopped"}));
}

TEST(WorkerWatchTest, ASignalStopsTheWorker) {
  FakeRuntime runtime;
  WorkerWatch watch(&runtime);
  WorkerNews news;
  news.job_state = RUNNING_JOB;
  news.shutdown = true;
  EXPECT_TRUE(watch.Step(news));
  EXPECT_EQ(runtime.calls, (CallLog{"stop", "cancel the worker stopped"}));
}

}  // namespace
}  // namespace pstrain
