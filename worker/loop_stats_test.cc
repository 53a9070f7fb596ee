// LoopStats on times given by the test: per-clock splits of a window and
// of the run (the first clock left out), samples per second, evaluations
// left out of training time, and calls and bytes across replaced clients.
#include "worker/loop_stats.h"

#include "gtest/gtest.h"
#include "worker/testing/fakes.h"

namespace pstrain {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

// A clock of 1 ms gate, 2 ms pull, 3 ms compute, 4 ms push.
void FillClock(LoopStats* stats) {
  stats->clock().gate += absl::Milliseconds(1);
  stats->clock().pull += absl::Milliseconds(2);
  stats->clock().compute += absl::Milliseconds(3);
  stats->clock().push += absl::Milliseconds(4);
}

TEST(LoopStatsTest, AWindowsFiguresArePerClock) {
  LoopStats stats(kT0);
  FillClock(&stats);
  stats.EndClock(/*loss=*/2.0, {3, 300}, kT0 + absl::Seconds(1));
  FillClock(&stats);
  stats.EndClock(/*loss=*/1.0, {6, 600}, kT0 + absl::Seconds(2));
  EXPECT_EQ(stats.window_clocks(), 2);
  const WindowFigures w = stats.EndWindow({6, 600}, /*batch_size=*/100, kT0 + absl::Seconds(2));
  EXPECT_EQ(w.clocks, 2);
  EXPECT_DOUBLE_EQ(w.mean_loss, 1.5);
  EXPECT_DOUBLE_EQ(w.samples_per_s, 100.0);  // 2 clocks of 100 in 2 s
  EXPECT_DOUBLE_EQ(w.split.gate_ms(), 1);
  EXPECT_DOUBLE_EQ(w.split.pull_ms(), 2);
  EXPECT_DOUBLE_EQ(w.split.compute_ms(), 3);
  EXPECT_DOUBLE_EQ(w.split.push_ms(), 4);
  EXPECT_DOUBLE_EQ(w.split.rpcs(), 3);
  EXPECT_DOUBLE_EQ(w.split.bytes(), 300);
  // The next window starts empty, its traffic counted from here.
  EXPECT_EQ(stats.window_clocks(), 0);
  FillClock(&stats);
  stats.EndClock(0.5, {7, 650}, kT0 + absl::Seconds(4));
  const WindowFigures next = stats.EndWindow({7, 650}, 100, kT0 + absl::Seconds(4));
  EXPECT_DOUBLE_EQ(next.samples_per_s, 50.0);
  EXPECT_DOUBLE_EQ(next.split.rpcs(), 1);
  EXPECT_DOUBLE_EQ(next.split.bytes(), 50);
  EXPECT_DOUBLE_EQ(next.split.push_ms(), 4);
}

// Status's loss: the mean of the last 16 clocks' (of those there were).
TEST(LoopStatsTest, TheRecentLossIsTheLastSixteenClocksMean) {
  LoopStats stats(kT0);
  EXPECT_EQ(stats.recent_loss(), 0);
  stats.EndClock(3.0, {}, kT0);
  stats.EndClock(1.0, {}, kT0);
  EXPECT_EQ(stats.recent_loss(), 2.0);
  for (int i = 0; i < LoopStats::kRecentClocks; ++i) stats.EndClock(0.5, {}, kT0);
  EXPECT_EQ(stats.recent_loss(), 0.5);  // the first two have left
  stats.EndClock(2.1, {}, kT0);
  EXPECT_DOUBLE_EQ(stats.recent_loss(), (15 * 0.5 + 2.1) / 16);
}

TEST(LoopStatsTest, TheRunStartsAfterItsFirstClockAndLeavesEvaluationsOut) {
  LoopStats stats(kT0);
  stats.clock().gate += absl::Seconds(30);  // the first clock waited for the cluster
  EXPECT_EQ(stats.EndClock(1.0, {2, 20}, kT0 + absl::Seconds(30)), std::nullopt);
  FillClock(&stats);
  std::optional<RunFigures> run = stats.EndClock(1.0, {5, 50}, kT0 + absl::Seconds(31));
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->clocks, 1);
  EXPECT_DOUBLE_EQ(run->train_s, 1.0);
  EXPECT_DOUBLE_EQ(run->split.gate_ms(), 1);  // not the first clock's 30 s
  EXPECT_DOUBLE_EQ(run->split.rpcs(), 3);
  EXPECT_DOUBLE_EQ(run->split.bytes(), 30);
  // An evaluation of 4 s is not training time.
  stats.Evaluated(kT0 + absl::Seconds(31), kT0 + absl::Seconds(35));
  FillClock(&stats);
  run = stats.EndClock(1.0, {8, 80}, kT0 + absl::Seconds(36));
  EXPECT_EQ(run->clocks, 2);
  EXPECT_DOUBLE_EQ(run->train_s, 2.0);
  EXPECT_DOUBLE_EQ(run->split.compute_ms(), 3);
  // The window restarted at the evaluation's end: 3 clocks in 1 s.
  const WindowFigures w = stats.EndWindow({8, 80}, 10, kT0 + absl::Seconds(36));
  EXPECT_DOUBLE_EQ(w.samples_per_s, 30.0);
}

TEST(LoopStatsTest, CallsAndBytesOfReplacedClientsStayCounted) {
  testing::CallLog log;
  testing::FakeParamClient old_client(&log, 0, false), new_client(&log, 1, false);
  LoopStats stats(kT0);
  stats.CountGateCall();
  ParamBuffers w(1, std::vector<float>(2));
  (void)old_client.Wait(old_client.Pull(0, 0, &w, nullptr));
  (void)old_client.Wait(old_client.Push(0, 1, &w, 0, {}, {}, {}));
  EXPECT_EQ(stats.Total(&old_client).calls, 3);
  EXPECT_EQ(stats.Total(&old_client).bytes, 8);
  stats.Retire(old_client);  // a rollback: generation 1's client
  stats.CountGateCall();
  (void)new_client.Wait(new_client.Pull(1, 1, &w, nullptr));
  EXPECT_EQ(stats.Total(&new_client).calls, 5);
  EXPECT_EQ(stats.Total(&new_client).bytes, 12);
  EXPECT_EQ(stats.Total(nullptr).calls, 4);
}

}  // namespace
}  // namespace pstrain
