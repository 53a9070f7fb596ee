#include "scheduler/clock_table.h"

#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(ClockTableTest, BspGateWaitsForEveryone) {
  ClockTable t(3, 0);
  EXPECT_TRUE(t.MayStart(0));
  EXPECT_TRUE(t.Advance(0, 1).ok());
  EXPECT_FALSE(t.MayStart(1));
  EXPECT_TRUE(t.Advance(1, 1).ok());
  EXPECT_FALSE(t.MayStart(1));
  EXPECT_TRUE(t.Advance(2, 1).ok());
  EXPECT_TRUE(t.MayStart(1));
  EXPECT_FALSE(t.MayStart(2));
  EXPECT_EQ(t.SlowestClock(), 1);
}

TEST(ClockTableTest, ARemovedWorkerNoLongerHoldsTheGate) {
  ClockTable t(3, 0);
  ASSERT_TRUE(t.Advance(0, 1).ok());
  ASSERT_TRUE(t.Advance(1, 1).ok());
  EXPECT_FALSE(t.MayStart(1));  // worker 2 is at 0
  t.Remove(2);
  EXPECT_TRUE(t.removed(2));
  EXPECT_TRUE(t.MayStart(1));
  EXPECT_EQ(t.SlowestClock(), 1);
}

TEST(ClockTableTest, SspAllowsTheBound) {
  ClockTable t(2, 2);
  for (int c = 1; c <= 4; ++c) ASSERT_TRUE(t.Advance(0, c).ok());
  // Worker 1 at 0: iterations up to 2 may start, not 3.
  EXPECT_TRUE(t.MayStart(2));
  EXPECT_FALSE(t.MayStart(3));
  ASSERT_TRUE(t.Advance(1, 1).ok());
  EXPECT_TRUE(t.MayStart(3));
  EXPECT_FALSE(t.MayStart(4));
}

TEST(ClockTableTest, AspNeverBlocks) {
  ClockTable t(2, -1);
  EXPECT_TRUE(t.MayStart(1000000));
}

TEST(ClockTableTest, ClocksMoveByOne) {
  ClockTable t(2, 0);
  EXPECT_TRUE(t.Advance(0, 0).ok());  // a retry of the current value
  EXPECT_TRUE(t.Advance(0, 1).ok());
  EXPECT_TRUE(t.Advance(0, 1).ok());
  EXPECT_EQ(t.Advance(0, 3).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.Advance(0, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.Advance(2, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.Advance(-1, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.clock(0), 1);
}

TEST(ClockTableTest, ResetSendsEveryWorkerBack) {
  ClockTable t(2, 0);
  for (int64_t c = 1; c <= 5; ++c) {
    ASSERT_TRUE(t.Advance(0, c).ok());
    ASSERT_TRUE(t.Advance(1, c).ok());
  }
  t.Reset(3);
  EXPECT_EQ(t.clock(0), 3);
  EXPECT_EQ(t.SlowestClock(), 3);
  EXPECT_TRUE(t.Advance(0, 4).ok());
  EXPECT_FALSE(t.MayStart(5));
}

TEST(ClockTableTest, RewindSendsOneWorkerBackNeverForward) {
  ClockTable t(2, 0);
  ASSERT_TRUE(t.Advance(0, 1).ok());
  t.Rewind(0, 0);
  t.Rewind(1, 5);
  EXPECT_EQ(t.clock(0), 0);
  EXPECT_EQ(t.clock(1), 0);
  EXPECT_TRUE(t.Advance(0, 1).ok());
}

}  // namespace
TEST(ClockTableTest, ARestoredTableJumpsOnceOrCatchesUpFromAHeartbeat) {
  ClockTable t(2, 0);
  t.Restore({3, 3}, {false, false});
  EXPECT_TRUE(t.Resyncing());
  ASSERT_TRUE(t.Advance(0, 7).ok());  // a report after the takeover: one jump
  EXPECT_FALSE(t.Advance(0, 9).ok());  // then one at a time again
  ASSERT_TRUE(t.CatchUp(1, 8));        // a heartbeat ahead of the reports
  EXPECT_FALSE(t.Resyncing());
  EXPECT_FALSE(t.CatchUp(1, 9));       // once
  EXPECT_TRUE(t.Advance(1, 7).ok());   // the lagging reports are no-ops
  EXPECT_EQ(t.clock(1), 8);
  EXPECT_TRUE(t.Advance(1, 8).ok());
  EXPECT_TRUE(t.Advance(1, 9).ok());
  EXPECT_FALSE(t.Advance(1, 8).ok());  // and then strict again
}

TEST(ClockTableTest, AReplacementStartsWhereThePushesWereKnownToLand) {
  ClockTable t(2, 0);
  t.Reset(4);  // a job resumed at clock 4: what it has is in the checkpoint
  EXPECT_EQ(t.RestartPoint(0), 4);
  for (int64_t c = 5; c <= 7; ++c) ASSERT_TRUE(t.Advance(0, c).ok());
  t.NotePushed(0, 6);
  t.NotePushed(0, 5);  // never back
  t.NotePushed(1, 9);  // never above the worker's clock
  EXPECT_EQ(t.RestartPoint(0), 6);
  EXPECT_EQ(t.clock(0), 6);
  EXPECT_EQ(t.RestartPoint(1), 4);
  EXPECT_TRUE(t.Advance(0, 7).ok());  // it repeats clock 6

  // The durable part keeps them; an older file without them keeps the clocks.
  t.NotePushed(0, 7);
  ClockTable restored(2, 0);
  ASSERT_TRUE(restored.Restore(t.Snapshot(), 100).ok());
  EXPECT_EQ(restored.RestartPoint(0), 7);
  ClockTableState old = t.Snapshot();
  old.clear_pushed();
  ClockTable from_old(2, 0);
  ASSERT_TRUE(from_old.Restore(old, 100).ok());
  EXPECT_EQ(from_old.RestartPoint(0), 7);
  ClockTableState bad = t.Snapshot();
  bad.add_pushed(1);
  EXPECT_FALSE(from_old.Restore(bad, 100).ok());
}

}  // namespace pstrain
