#include "common/pulled_clocks.h"

#include "gtest/gtest.h"

namespace pstrain {
namespace {

// Parts of one pull merge into the fewest applied per worker, the most of
// the reader's own pushes applied, and the fewest it holds everywhere.
TEST(PulledClocksTest, PartsMergeIntoTheWholePullsClocks) {
  PulledClocks whole;
  whole.Merge({{7, 1, 9}, 60, 61});
  whole.Merge({{5, 3, 9}, 61, 60});
  EXPECT_EQ(whole.applied, (std::vector<int64_t>{5, 1, 9}));
  EXPECT_EQ(whole.own_applied_most, 61);
  EXPECT_EQ(whole.own_held_least, 60);
}

// Redoing clock 60: inexact only when some chunk applied the reader's push
// of 60 (its weights are newer) while another lacks it.
TEST(PulledClocksTest, ARedoIsInexactOnlyWhenAppliedSomewhereAndMissingElsewhere) {
  EXPECT_TRUE((PulledClocks{{}, 61, 60}).RedoIsInexact(60));
  EXPECT_FALSE((PulledClocks{{}, 61, 61}).RedoIsInexact(60)) << "every chunk holds it";
  EXPECT_FALSE((PulledClocks{{}, 60, 60}).RedoIsInexact(60)) << "applied nowhere";
  EXPECT_FALSE((PulledClocks{{}, 61, 60}).RedoIsInexact(61)) << "a clock not yet pushed";
  EXPECT_FALSE(PulledClocks().RedoIsInexact(0)) << "nothing read";
}

}  // namespace
}  // namespace pstrain
