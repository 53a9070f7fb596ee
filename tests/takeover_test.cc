// A restartable scheduler: SIGKILL of ps_scheduler at a random clock, then
// a scheduler started again on the same --state_dir and address takes the
// job over. No member exits; the job finishes with weights bit-identical to
// an undisturbed run (BSP, with and without global-norm clipping, whose
// rounds the servers' heartbeats complete). A --job that is not the state's
// job is refused. A rolling restart (SIGTERM) at 10 clocks loses nothing;
// one scheduler a job.
#include <signal.h>

#include <cctype>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "proto/tensor.pb.h"
#include "tests/cluster.h"
#include "tests/test_jobs.h"
#include "tests/wait.h"

namespace pstrain {
namespace testing {
namespace {

std::string Job(bool clip, bool ssp = false) {
  std::string job = SixteenClassJob("clocks: 300\nseed: 5\nchunk_bytes: 512\n");
  if (ssp) job = absl::StrReplaceAll(job, {{"consistency: BSP", "consistency: SSP staleness: 2"}});
  if (clip) {
    job = absl::StrReplaceAll(job, {{"learning_rate: 0.01 }", "learning_rate: 0.01 clip_norm: 0.5 }"}});
  }
  return job;
}

ClusterOptions Options(const std::string& dir, bool clip, bool ssp = false) {
  ClusterOptions options;
  options.job_text = Job(clip, ssp);
  options.servers = 2;
  options.workers = 2;
  options.scheduler_flags = {"--heartbeat_timeout_ms=3000", "--state_dir=" + dir + "/state",
                             "--checkpoint_dir=" + dir + "/ckpt", "--checkpoint_every=50"};
  for (int w = 0; w < 2; ++w) {
    options.worker_flags.push_back({"--straggler=fixed:10", "--scheduler_timeout_ms=20000"});
  }
  options.server_flags = {"--scheduler_timeout_ms=20000"};
  return options;
}

std::string WeightsBytes(const Cluster& cluster, int worker) {
  return ReadFile(cluster.worker_weights(worker));
}

// Waits for the job's end: the scheduler's exit code and every member's
// must be 0. The scheduler's final Status.
absl::StatusOr<ClusterStatus> EveryMemberExitsZero(Cluster& cluster) {
  absl::StatusOr<int> code = cluster.WaitAll(absl::Seconds(180));
  if (!code.ok()) return code.status();
  EXPECT_EQ(*code, 0) << "the scheduler's exit";
  for (Process& p : cluster.servers()) EXPECT_EQ(p.Wait(absl::ZeroDuration()).value_or(-1), 0);
  for (Process& p : cluster.workers()) EXPECT_EQ(p.Wait(absl::ZeroDuration()).value_or(-1), 0);
  return cluster.FinalStatus();
}

class TakeoverTest : public ::testing::TestWithParam<bool> {};

// Whether the slowest worker of `cluster` reaches `clock` within 60 s with
// the scheduler still running then.
bool ReachesClock(Cluster& cluster, int64_t clock) {
  return WaitForStatus(
      cluster.scheduler_address(),
      [&](const ClusterStatus& st) { return SlowestClock(st) >= clock; }, absl::Seconds(60),
      absl::Milliseconds(5)) && cluster.scheduler().running();
}

TEST_P(TakeoverTest, AKilledSchedulerStartedAgainTakesTheJobOverBitIdentically) {
  const bool clip = GetParam();
  Cluster calm(clip ? "calm_clip" : "calm");
  ASSERT_TRUE(calm.Start(Options(calm.dir(), clip)).ok()) << calm.Logs();
  ASSERT_EQ(calm.WaitAll(absl::Seconds(180)).value_or(-1), 0) << calm.Logs();
  const std::string expected = WeightsBytes(calm, 0);
  ASSERT_FALSE(expected.empty());

  std::mt19937 rng(std::random_device{}());
  for (int round = 0; round < 2; ++round) {
    Cluster cluster(absl::StrCat(clip ? "takeover_clip" : "takeover", round));
    ASSERT_TRUE(cluster.Start(Options(cluster.dir(), clip)).ok()) << cluster.Logs();
    const int64_t at = 20 + rng() % 200;
    ASSERT_TRUE(ReachesClock(cluster, at)) << "stuck before clock " << at << cluster.Logs();
    // SIGKILL, then SIGTERM: an interrupted scheduler with a state dir
    // keeps the job (exit 1) instead of aborting it.
    const int signal = round == 0 ? SIGKILL : SIGTERM;
    cluster.scheduler().Kill(signal);
    ASSERT_EQ(cluster.scheduler().Wait(absl::Seconds(10)).value_or(-1),
              signal == SIGKILL ? 128 + SIGKILL : 1)
        << cluster.Logs();
    absl::SleepFor(absl::Milliseconds(rng() % 2000));  // down for a while
    const absl::Time restarted = absl::Now();
    ASSERT_TRUE(cluster.RestartScheduler().ok()) << cluster.Logs();
    absl::StatusOr<ClusterStatus> end = EveryMemberExitsZero(cluster);
    ASSERT_TRUE(end.ok()) << end.status() << cluster.Logs();
    EXPECT_EQ(end->scheduler_takeovers(), 1);
    EXPECT_EQ(end->generation(), 0) << "no rollback needed";
    std::printf("%s: scheduler killed at clock >= %lld; job %s %.1f s after the restart\n",
                clip ? "clipped" : "plain", static_cast<long long>(at),
                JobState_Name(end->job_state()).c_str(),
                absl::ToDoubleSeconds(absl::Now() - restarted));
    for (int w = 0; w < 2; ++w) {
      EXPECT_TRUE(WeightsBytes(cluster, w) == expected)
          << "worker " << w << "'s weights differ from the undisturbed run's";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(BspWithAndWithoutClipping, TakeoverTest, ::testing::Bool());

// Under SSP a worker may wait in a pull (or its final read) for another's
// pushes without reporting a clock, while the other waits at the gate for
// its clock: the new scheduler learns it from heartbeats. Killed late, when
// the first workers are in their final read.
TEST(SspTakeoverTest, AKilledSchedulerStartedAgainFinishesTheJob) {
  std::mt19937 rng(std::random_device{}());
  for (int round = 0; round < 2; ++round) {
    Cluster cluster(absl::StrCat("takeover_ssp", round));
    ASSERT_TRUE(cluster.Start(Options(cluster.dir(), false, /*ssp=*/true)).ok()) << cluster.Logs();
    const int64_t at = round == 0 ? 100 + rng() % 150 : 290 + rng() % 8;
    ASSERT_TRUE(ReachesClock(cluster, at)) << "stuck before clock " << at << cluster.Logs();
    cluster.scheduler().Kill(SIGKILL);
    (void)cluster.scheduler().Wait(absl::Seconds(10));
    absl::SleepFor(absl::Milliseconds(1500));
    ASSERT_TRUE(cluster.RestartScheduler().ok()) << cluster.Logs();
    absl::StatusOr<int> code = cluster.WaitAll(absl::Seconds(120));
    ASSERT_TRUE(code.ok()) << code.status() << cluster.Logs();
    EXPECT_EQ(*code, 0) << cluster.Logs();
    for (Process& p : cluster.workers()) EXPECT_EQ(p.Wait(absl::ZeroDuration()).value_or(-1), 0);
  }
}

// A rolling restart: the scheduler stopped with SIGTERM (as Kubernetes or
// systemctl restart do) at 10 clocks spread over the job, each time started
// again on its state dir after up to half a second. Calls the leaving
// scheduler held or cancelled must not end any member: the job finishes
// with no abort and no rollback, every member exits 0, and the clock table
// ends at the job's last clock.
class RollingRestartTest : public ::testing::TestWithParam<bool> {};

TEST_P(RollingRestartTest, TenSigtermsSpreadOverTheJobLoseNothing) {
  const bool ssp = GetParam();
  // BSP with global-norm clipping (every clock holds a norm round at the
  // scheduler), or SSP with staleness 2.
  const bool clip = !ssp;
  std::string expected;
  if (clip) {
    Cluster calm("rolling_calm");
    ASSERT_TRUE(calm.Start(Options(calm.dir(), clip)).ok()) << calm.Logs();
    ASSERT_EQ(calm.WaitAll(absl::Seconds(180)).value_or(-1), 0) << calm.Logs();
    expected = WeightsBytes(calm, 0);
  }
  Cluster cluster(ssp ? "rolling_ssp" : "rolling_clip");
  ASSERT_TRUE(cluster.Start(Options(cluster.dir(), clip, ssp)).ok()) << cluster.Logs();
  std::mt19937 rng(std::random_device{}());
  constexpr int kRestarts = 10;
  for (int i = 0; i < kRestarts; ++i) {
    const int64_t at = 15 + i * 27 + rng() % 10;  // 15..267 of 300
    ASSERT_TRUE(ReachesClock(cluster, at)) << "stuck before clock " << at << cluster.Logs();
    cluster.scheduler().Kill(SIGTERM);
    ASSERT_EQ(cluster.scheduler().Wait(absl::Seconds(10)).value_or(-1), 1)
        << "restart " << i << cluster.Logs();
    absl::SleepFor(absl::Milliseconds(rng() % 500));
    ASSERT_TRUE(cluster.RestartScheduler().ok()) << cluster.Logs();
  }
  absl::StatusOr<ClusterStatus> end = EveryMemberExitsZero(cluster);
  ASSERT_TRUE(end.ok()) << end.status() << cluster.Logs();
  EXPECT_EQ(end->job_state(), DONE) << end->message();
  EXPECT_EQ(end->scheduler_takeovers(), kRestarts);
  EXPECT_EQ(end->generation(), 0) << "no rollback needed";
  for (int w = 0; w < 2; ++w) {
    EXPECT_EQ(MemberOf(*end, WORKER, w).clock(), 300) << "worker " << w;
    ASSERT_GT(end->worker_clocks_size(), w);
    EXPECT_EQ(end->worker_clocks(w), 300) << "worker " << w << " in the clock table";
    if (clip) {
      EXPECT_TRUE(WeightsBytes(cluster, w) == expected)
          << "worker " << w << "'s weights differ from the undisturbed run's";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ClippedBspAndSsp, RollingRestartTest, ::testing::Bool());

// True when `out` names process `pid` ("pid 1234" not followed by a digit).
bool NamesPid(const std::string& out, pid_t pid) {
  const std::string want = absl::StrCat("pid ", pid);
  for (size_t at = out.find(want); at != std::string::npos; at = out.find(want, at + 1)) {
    const size_t next = at + want.size();
    if (next == out.size() || !std::isdigit(static_cast<unsigned char>(out[next]))) return true;
  }
  return false;
}

// One scheduler a job: a second one started on the running one's port, or
// on its state dir, exits 2 naming the first (no shared port, no second
// writer of the state), and the first job ends DONE without a takeover.
TEST(OneSchedulerAJobTest, ASecondSchedulerOnTheSamePortOrStateDirIsExitTwoNamingTheHolder) {
  Cluster cluster("one_scheduler");
  ASSERT_TRUE(cluster.Start(Options(cluster.dir(), false)).ok()) << cluster.Logs();
  ASSERT_TRUE(ReachesClock(cluster, 20)) << cluster.Logs();
  const std::string state = cluster.dir() + "/state";
  const std::string address = cluster.scheduler_address();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {address, state}, {address, cluster.dir() + "/another_state"}, {"127.0.0.1:0", state}};
  for (const auto& [listen, state_dir] : cases) {
    std::string out;
    absl::StatusOr<int> code = RunCommand(
        {BinaryPath("scheduler/ps_scheduler"), "--job=" + cluster.dir() + "/job.pbtxt",
         "--listen=" + listen, "--num_servers=2", "--num_workers=2", "--state_dir=" + state_dir},
        &out, absl::Seconds(20), "second");
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 2) << listen << " " << state_dir << ": " << out;
    EXPECT_TRUE(NamesPid(out, cluster.scheduler().pid())) << out;
  }
  absl::StatusOr<int> code = cluster.WaitAll(absl::Seconds(180));
  ASSERT_TRUE(code.ok()) << code.status() << cluster.Logs();
  EXPECT_EQ(*code, 0) << cluster.Logs();
  absl::StatusOr<ClusterStatus> end = cluster.FinalStatus();
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->job_state(), DONE) << end->message();
  EXPECT_EQ(end->scheduler_takeovers(), 0);
  for (Process& p : cluster.workers()) EXPECT_EQ(p.Wait(absl::ZeroDuration()).value_or(-1), 0);
}

TEST(TakeoverRefusalTest, AnotherJobOnTheStateDirIsExitTwo) {
  Cluster cluster("takeover_refusal");
  ClusterOptions options = Options(cluster.dir(), false);
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.Logs();
  ASSERT_TRUE(ReachesClock(cluster, 5)) << cluster.Logs();
  cluster.scheduler().Kill(SIGKILL);
  (void)cluster.scheduler().Wait(absl::Seconds(10));
  const std::string other = cluster.dir() + "/other.pbtxt";
  WriteFile(other, Job(/*clip=*/true));
  std::string out;
  absl::StatusOr<int> code = RunCommand(
      {BinaryPath("scheduler/ps_scheduler"), "--job=" + other, "--num_servers=2",
       "--num_workers=2", "--state_dir=" + cluster.dir() + "/state"},
      &out, absl::Seconds(20), "other");
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 2) << out;
  // The right one takes over and finishes.
  ASSERT_TRUE(cluster.RestartScheduler().ok()) << cluster.Logs();
  EXPECT_EQ(cluster.WaitAll(absl::Seconds(180)).value_or(-1), 0) << cluster.Logs();
  // A scheduler started on the state of the ended job has nothing to take
  // over: it says so with the job's code (0: DONE) and does not serve.
  code = RunCommand({BinaryPath("scheduler/ps_scheduler"), "--state_dir=" + cluster.dir() + "/state"},
                    &out, absl::Seconds(20), "ended");
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 0) << out;
}

}  // namespace
}  // namespace testing
}  // namespace pstrain
