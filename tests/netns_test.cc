// A worker cut off from the network for 10 s: it runs in a network namespace
// of its own, joined to the host's by a veth pair whose host end is set down
// and, 10 s later, up again. Under --on_worker_failure=wait the job holds
// the gate and the worker rejoins; under shrink the other worker takes over
// its share and the cut-off worker, declared dead, is told so when it is
// back. Needs root and `ip netns`; without them it skips, saying why. The
// worker in the namespace cannot reach the servers' shared memory (abstract
// Unix sockets belong to a network namespace) and trains over gRPC.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/cluster.h"
#include "tests/netns.h"
#include "tests/test_jobs.h"

namespace pstrain {
namespace testing {
namespace {

struct Member {
  MemberState state = MEMBER_STATE_UNSPECIFIED;
  int64_t clock = -1;
};

Member Worker(const std::string& scheduler, int id) {
  absl::StatusOr<ClusterStatus> st = SchedulerStatus(scheduler);
  if (!st.ok()) return {};
  for (const MemberStatus& m : st->members()) {
    if (m.role() == WORKER && m.id() == id) return {m.state(), m.clock()};
  }
  return {};
}

// Runs the job with worker process 1 in a namespace cut off for 10 s after
// clock 50, under `policy`; `clocks` long enough for the job to outlast the
// cut.
void CutOffAWorker(const std::string& policy, int index, int clocks) {
  if (const std::string why = Netns::Unavailable(); !why.empty()) {
    std::printf("skipped: %s\n", why.c_str());
    GTEST_SKIP() << why;
  }
  Netns ns(index);
  if (!ns.error().empty()) {
    std::printf("skipped: cannot make a network namespace: %s\n", ns.error().c_str());
    GTEST_SKIP() << ns.error();
  }
  Cluster cluster("netns_" + policy);
  ClusterOptions options;
  options.job_text = SixteenClassJob(absl::StrCat("clocks: ", clocks, "\nseed: 5"));
  options.servers = 1;
  options.workers = 2;
  options.host = ns.host_ip();
  options.scheduler_flags = {"--heartbeat_timeout_ms=3000", "--end_grace_ms=3000",
                             "--on_worker_failure=" + policy};
  options.worker_flags = {{"--straggler=fixed:10"}, {"--straggler=fixed:10"}};
  options.worker_prefix = {{}, {kIp, "netns", "exec", ns.name()}};
  options.worker_host = {ns.host_ip(), ns.ns_ip()};
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.Logs();
  const std::string& scheduler = cluster.scheduler_address();
  int cut = -1;  // the id of the worker in the namespace
  for (int i = 0; i < 1000 && cut < 0; ++i) {
    if (Worker(scheduler, 0).clock >= 50 && Worker(scheduler, 1).clock >= 50) {
      cut = cluster.MemberId(WORKER, 1);
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_GE(cut, 0) << cluster.Logs();
  const int other = 1 - cut;

  ASSERT_TRUE(ns.SetLink(false));
  absl::SleepFor(absl::Seconds(4));  // past the heartbeat timeout
  const Member cut_during = Worker(scheduler, cut);
  const int64_t other_at_4s = Worker(scheduler, other).clock;
  absl::SleepFor(absl::Seconds(2));
  const int64_t other_at_6s = Worker(scheduler, other).clock;
  absl::SleepFor(absl::Seconds(4));
  ASSERT_TRUE(ns.SetLink(true));
  std::printf(
      "%s: 4 s into the cut worker %d was %s; the other went from clock %lld to %lld "
      "in the next 2 s\n",
      policy.c_str(), cut, MemberState_Name(cut_during.state).c_str(),
      static_cast<long long>(other_at_4s), static_cast<long long>(other_at_6s));
  EXPECT_EQ(cut_during.state, DEAD);

  absl::StatusOr<int> code = cluster.WaitAll(absl::Seconds(180));
  ASSERT_TRUE(code.ok()) << code.status() << cluster.Logs();
  EXPECT_EQ(*code, 0) << cluster.Logs();
  // Process 1 is the one in the namespace.
  const int cut_code = *cluster.workers()[1].Wait(absl::ZeroDuration());
  const int other_code = *cluster.workers()[0].Wait(absl::ZeroDuration());
  EXPECT_EQ(other_code, 0) << cluster.Logs();
  absl::StatusOr<ClusterStatus> final_status = cluster.FinalStatus();
  ASSERT_TRUE(final_status.ok()) << final_status.status();
  EXPECT_EQ(final_status->job_state(), DONE);
  EXPECT_EQ(MemberOf(*final_status, WORKER, other).state(), FINISHED);
  if (policy == "wait") {
    // The gate held (BSP): the other worker did not move while it was dead;
    // then the cut-off worker rejoined and finished the job.
    EXPECT_EQ(other_at_4s, other_at_6s);
    EXPECT_EQ(cut_code, 0) << cluster.Logs();
    const MemberStatus cut_worker = MemberOf(*final_status, WORKER, cut);
    EXPECT_EQ(cut_worker.state(), FINISHED);
    // Shared memory only within one network namespace: the worker on the
    // host used it, the one in its own namespace fell back to the messages.
    EXPECT_GT(MemberOf(*final_status, WORKER, other).shm_bytes(), 0);
    EXPECT_EQ(cut_worker.shm_bytes(), 0);
    EXPECT_GT(cut_worker.bytes_in(), 0);
  } else {
    // The other worker went on alone; the cut-off one, back while the job
    // still ran, learned it had been declared dead.
    EXPECT_GT(other_at_6s, other_at_4s);
    EXPECT_EQ(cut_code, 1) << cluster.Logs();
    EXPECT_EQ(MemberOf(*final_status, WORKER, cut).state(), DEAD);
  }
}

TEST(NetnsTest, UnderWaitACutOffWorkerRejoins) { CutOffAWorker("wait", 0, 400); }

TEST(NetnsTest, UnderShrinkTheOtherWorkerTakesOverACutOffWorkersShare) {
  // The other worker alone runs about 90 clocks a second: 1600 clocks
  // outlast the cut.
  CutOffAWorker("shrink", 1, 1600);
}

}  // namespace
}  // namespace testing
}  // namespace pstrain
