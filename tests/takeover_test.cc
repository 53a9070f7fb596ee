// A restartable scheduler: SIGKILL of ps_scheduler at a random clock, then
// a scheduler started again on the same --state_dir and address takes the
// job over. No member exits; the job finishes with weights bit-identical to
// an undisturbed run (BSP, with and without global-norm clipping, whose
// rounds the servers' heartbeats complete). A --job that is not the state's
// job is refused.
#include <signal.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "proto/tensor.pb.h"
#include "tests/cluster.h"
#include "tests/test_jobs.h"

namespace pstrain {
namespace testing {
namespace {

std::string Job(bool clip, bool ssp = false) {
  std::string job = SixteenClassJob("steps: 300\nseed: 5\nchunk_bytes: 512\n");
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
    options.worker_flags.push_back({"--debug_slowdown_ms=10", "--scheduler_timeout_ms=20000"});
  }
  options.server_flags = {"--scheduler_timeout_ms=20000"};
  return options;
}

std::string WeightsBytes(const Cluster& cluster, int worker) {
  return ReadFile(cluster.worker_weights(worker));
}

class TakeoverTest : public ::testing::TestWithParam<bool> {};

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
    while (SlowestWorkerClock(cluster.scheduler_address()) < at) {
      ASSERT_TRUE(cluster.scheduler().running()) << cluster.Logs();
      absl::SleepFor(absl::Milliseconds(10));
    }
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
    absl::StatusOr<int> code = cluster.WaitAll(absl::Seconds(180));
    ASSERT_TRUE(code.ok()) << code.status() << cluster.Logs();
    EXPECT_EQ(*code, 0) << cluster.Logs();
    for (Process& p : cluster.servers()) EXPECT_EQ(p.Wait(absl::ZeroDuration()).value_or(-1), 0);
    for (Process& p : cluster.workers()) EXPECT_EQ(p.Wait(absl::ZeroDuration()).value_or(-1), 0);
    absl::StatusOr<ClusterStatus> end = cluster.FinalStatus();
    ASSERT_TRUE(end.ok()) << end.status();
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
    while (SlowestWorkerClock(cluster.scheduler_address()) < at) {
      ASSERT_TRUE(cluster.scheduler().running()) << cluster.Logs();
      absl::SleepFor(absl::Milliseconds(5));
    }
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

TEST(TakeoverRefusalTest, AnotherJobOnTheStateDirIsExitTwo) {
  Cluster cluster("takeover_refusal");
  ClusterOptions options = Options(cluster.dir(), false);
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.Logs();
  while (SlowestWorkerClock(cluster.scheduler_address()) < 5) {
    absl::SleepFor(absl::Milliseconds(20));
  }
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
