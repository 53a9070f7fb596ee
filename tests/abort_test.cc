// Aborts reach everyone fast: once a job cannot go on -- a server killed or
// frozen in a job without checkpoints, its last worker dead, its scheduler
// gone for longer than the members' window -- every daemon has exited
// within the heartbeat timeout (or that window) + a slack of the fault,
// with a non-zero code, instead of retrying calls nobody will answer. The
// slack is 3.5 s on an idle machine -- less than one more window, so a
// daemon that waits out a second window (as a retried final report did) or
// a call's 30 s deadline fails the test -- and grows with the run queue per
// core (/proc/loadavg), since every daemon's reaction waits for a core: a
// machine loaded with other tests passes (exits of 4.2 s with a 1.5 s
// window, 7.9 s with a 4 s window, were seen at load averages of 12-16 on 2
// cores).
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/cluster.h"
#include "tests/test_jobs.h"
#include "tests/wait.h"

namespace pstrain {
namespace testing {
namespace {

constexpr int kTimeoutMs = 4000;  // the scheduler's heartbeat timeout, the members' window
constexpr double kSlackS = 3.5;   // on an idle machine

// The window + the slack, scaled by the load (at least 1x).
double Allowed() { return kTimeoutMs / 1000.0 + kSlackS * std::max(1.0, LoadPerCore()); }

ClusterOptions Options(int workers) {
  ClusterOptions options;
  // Long enough that nothing finishes by itself during the test.
  options.job_text = SixteenClassJob("clocks: 100000\nseed: 7\nchunk_bytes: 1024");
  options.servers = 2;
  options.workers = workers;
  const std::string window = absl::StrCat("--scheduler_timeout_ms=", kTimeoutMs);
  options.scheduler_flags = {absl::StrCat("--heartbeat_timeout_ms=", kTimeoutMs)};
  options.server_flags = {window};
  for (int w = 0; w < workers; ++w) options.worker_flags.push_back({window, "--straggler=fixed:5"});
  return options;
}

// Waits until every worker has trained `clocks` clocks.
bool Training(const Cluster& cluster, int workers, int64_t clocks = 10) {
  return WaitForStatus(
      cluster.scheduler_address(),
      [&](const ClusterStatus& st) { return WorkersAt(st, clocks) == workers; }, absl::Seconds(60),
      absl::Milliseconds(50));
}

struct Exited {
  std::string who;
  double seconds = -1;  // after the fault; -1: still running at the deadline
  int code = -1;
};

// Every process of the cluster but `skip`: when each exited, counted from
// `fault` (waiting at most until fault + `limit`).
std::vector<Exited> ExitTimes(Cluster& cluster, const Process* skip, absl::Time fault,
                              absl::Duration limit) {
  std::vector<std::pair<std::string, Process*>> all = {{"scheduler", &cluster.scheduler()}};
  for (size_t i = 0; i < cluster.servers().size(); ++i) {
    all.push_back({absl::StrCat("server process ", i), &cluster.servers()[i]});
  }
  for (size_t i = 0; i < cluster.workers().size(); ++i) {
    all.push_back({absl::StrCat("worker process ", i), &cluster.workers()[i]});
  }
  std::vector<Exited> out;
  for (auto& [who, p] : all) {
    if (p != skip) out.push_back(Exited{who});
  }
  for (bool waiting = true; waiting && absl::Now() < fault + limit;) {
    waiting = false;
    size_t k = 0;
    for (auto& [who, p] : all) {
      if (p == skip) continue;
      Exited& e = out[k++];
      if (e.seconds >= 0) continue;
      absl::StatusOr<int> code = p->Wait(absl::ZeroDuration());
      if (code.ok()) {
        e.seconds = absl::ToDoubleSeconds(absl::Now() - fault);
        e.code = *code;
      } else {
        waiting = true;
      }
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return out;
}

void ExpectAllExitedInTime(const std::vector<Exited>& exits, const Cluster& cluster,
                           const char* what) {
  const double allowed = Allowed();
  std::printf("%s: allowed %.2f s (load per core %.2f)\n", what, allowed, LoadPerCore());
  for (const Exited& e : exits) {
    std::printf("%s: %s exited after %.2f s with %d\n", what, e.who.c_str(), e.seconds, e.code);
    EXPECT_GE(e.seconds, 0) << what << ": " << e.who << " still running" << cluster.Logs();
    EXPECT_LE(e.seconds, allowed) << what << ": " << e.who << cluster.Logs();
    EXPECT_NE(e.code, 0) << what << ": " << e.who;
  }
}

TEST(AbortTest, AServerKilledWithoutCheckpointsEndsEveryDaemonPromptly) {
  Cluster cluster("abort_kill");
  ASSERT_TRUE(cluster.Start(Options(2)).ok()) << cluster.Logs();
  ASSERT_TRUE(Training(cluster, 2)) << cluster.Logs();
  const absl::Time fault = absl::Now();
  cluster.servers()[1].Kill(SIGKILL);
  ExpectAllExitedInTime(ExitTimes(cluster, &cluster.servers()[1], fault, absl::Seconds(90)),
                        cluster, "server killed");
}

TEST(AbortTest, AFrozenServerWithoutCheckpointsEndsEveryOtherDaemonPromptly) {
  Cluster cluster("abort_stop");
  ASSERT_TRUE(cluster.Start(Options(2)).ok()) << cluster.Logs();
  ASSERT_TRUE(Training(cluster, 2)) << cluster.Logs();
  const absl::Time fault = absl::Now();
  cluster.servers()[1].Kill(SIGSTOP);
  ExpectAllExitedInTime(ExitTimes(cluster, &cluster.servers()[1], fault, absl::Seconds(90)),
                        cluster, "server frozen");
  cluster.servers()[1].Kill(SIGKILL);
}

TEST(AbortTest, TheLastWorkerDeadEndsEveryDaemonPromptly) {
  Cluster cluster("abort_worker");
  ASSERT_TRUE(cluster.Start(Options(1)).ok()) << cluster.Logs();
  ASSERT_TRUE(Training(cluster, 1)) << cluster.Logs();
  const absl::Time fault = absl::Now();
  cluster.workers()[0].Kill(SIGKILL);
  ExpectAllExitedInTime(ExitTimes(cluster, &cluster.workers()[0], fault, absl::Seconds(90)),
                        cluster, "last worker killed");
}

TEST(AbortTest, TheSchedulerGonePastTheWindowEndsEveryMemberPromptly) {
  Cluster cluster("abort_scheduler");
  ASSERT_TRUE(cluster.Start(Options(2)).ok()) << cluster.Logs();
  ASSERT_TRUE(Training(cluster, 2)) << cluster.Logs();
  const absl::Time fault = absl::Now();
  cluster.scheduler().Kill(SIGKILL);
  ExpectAllExitedInTime(ExitTimes(cluster, &cluster.scheduler(), fault, absl::Seconds(90)),
                        cluster, "scheduler killed");
}

}  // namespace
}  // namespace testing
}  // namespace pstrain
