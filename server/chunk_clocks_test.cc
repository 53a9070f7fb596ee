#include "server/chunk_clocks.h"

#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

absl::StatusCode CodeOf(const ChunkClocks& c, int worker, int64_t clock, bool at_once = false,
                        bool* duplicate = nullptr) {
  bool dup = false;
  const absl::StatusCode code = c.Classify(worker, clock, 5, at_once, &dup).code();
  if (duplicate != nullptr) *duplicate = dup;
  return code;
}

// A BSP round: each worker's push of the round is its next; a second one
// of the same clock is a repeat; the round closes once every live worker
// has pushed, and every applied clock moves on together.
TEST(ChunkClocksTest, ABspRoundClosesOverEveryLiveWorker) {
  ChunkClocks c({true, true});
  bool duplicate = true;
  EXPECT_EQ(CodeOf(c, 0, 0, false, &duplicate), absl::StatusCode::kOk);
  EXPECT_FALSE(duplicate);
  c.Pushed(0);
  EXPECT_FALSE(c.RoundComplete());
  EXPECT_EQ(CodeOf(c, 0, 0, false, &duplicate), absl::StatusCode::kOk);
  EXPECT_TRUE(duplicate);                                          // a client's retry
  EXPECT_EQ(CodeOf(c, 0, 1), absl::StatusCode::kInvalidArgument);  // ahead of the round
  EXPECT_EQ(c.Lagging(1, /*bsp=*/true),
            "worker 0 (0 applied, its next push in), worker 1 (0 applied)");
  c.Pushed(1);
  EXPECT_TRUE(c.RoundComplete());
  c.NextRound();
  EXPECT_EQ(c.applied(), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(c.MinApplied(), 1);
  EXPECT_FALSE(c.RoundComplete());  // nobody has pushed to round 1
  EXPECT_EQ(c.Lagging(1, true), "");
}

// A dead worker stops counting: the round closes without it, its clock
// stays where it died, and the read guarantee ignores it.
TEST(ChunkClocksTest, ADeadWorkerLeavesTheRoundsAndTheMinimum) {
  ChunkClocks c({true, true, true});
  c.Pushed(0);
  c.Pushed(2);
  EXPECT_TRUE(c.Remove(1));
  EXPECT_FALSE(c.Remove(1));
  EXPECT_FALSE(c.live(1));
  EXPECT_TRUE(c.RoundComplete());
  c.NextRound();
  EXPECT_EQ(c.applied(), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(c.MinApplied(), 1);
  EXPECT_EQ(c.Lagging(2, false), "worker 0 (1 applied), worker 2 (1 applied)");
}

// Only the pushers count (a chunk of another pipeline stage's workers).
TEST(ChunkClocksTest, WorkersThatDoNotPushTheChunkNeverCount) {
  ChunkClocks c({true, false});
  EXPECT_FALSE(c.live(1));
  c.Applied(0, 0);  // SSP/ASP: applied at once
  c.Applied(0, 1);
  EXPECT_EQ(c.MinApplied(), 2);
  c.Remove(0);
  EXPECT_EQ(c.MinApplied(), 2);  // none live: the most applied
}

// After a switch from BSP, the first push applied at once waits while the
// worker's push of the clock before is still in an open round.
TEST(ChunkClocksTest, APushAtOnceWaitsForTheWorkersOpenBspRound) {
  ChunkClocks c({true, true});
  c.Pushed(0);
  EXPECT_EQ(CodeOf(c, 0, 1, /*at_once=*/true), absl::StatusCode::kUnavailable);
  c.Pushed(1);
  c.NextRound();
  EXPECT_EQ(CodeOf(c, 0, 1, /*at_once=*/true), absl::StatusCode::kOk);
}

// A rollback: the live workers restart at the checkpoint's clock, a dead
// one keeps an earlier clock, and the round is emptied.
TEST(ChunkClocksTest, ARestoreSetsTheLiveWorkersClocksAndEmptiesTheRound) {
  ChunkClocks c({true, true, true});
  for (int w : {0, 1, 2}) c.Applied(w, 9);  // all at 10
  c.Remove(2);
  c.Pushed(0);
  c.Restore(4);
  EXPECT_EQ(c.applied(), (std::vector<int64_t>{4, 4, 4}));
  EXPECT_FALSE(c.pushed(0));
  c.Applied(2, 1);  // (a dead worker's clock never moves; set for the test)
  c.Restore(3);
  EXPECT_EQ(c.applied(), (std::vector<int64_t>{3, 3, 2}));
}

}  // namespace
}  // namespace pstrain
