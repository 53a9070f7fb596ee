#include "scheduler/norm_rounds.h"

#include <limits>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(NormRoundsTest, TotalOnceEveryReporterReported) {
  NormRounds rounds({true, false, true}, 100);  // server 1 holds no chunks
  ASSERT_TRUE(rounds.Add(0, 5, 1.5).ok());
  EXPECT_FALSE(rounds.Total(5).has_value());
  ASSERT_TRUE(rounds.Add(0, 5, 1.5).ok());  // a retry counts once
  EXPECT_FALSE(rounds.Total(5).has_value());
  ASSERT_TRUE(rounds.Add(2, 5, 2.0).ok());
  ASSERT_TRUE(rounds.Total(5).has_value());
  EXPECT_DOUBLE_EQ(*rounds.Total(5), 3.5);
}

TEST(NormRoundsTest, TheTotalHasTheSameBitsWhateverTheArrivalOrder) {
  // (1 + 1) + 2^53 = 2^53 + 2, but (2^53 + 1) + 1 = 2^53 in doubles: adding
  // in arrival order would give two runs (or two schedulers) other totals.
  const double parts[3] = {1.0, 1.0, 9007199254740992.0};
  NormRounds a({true, true, true}, 10), b({true, true, true}, 10);
  for (int s : {0, 1, 2}) ASSERT_TRUE(a.Add(s, 0, parts[s]).ok());
  for (int s : {2, 0, 1}) ASSERT_TRUE(b.Add(s, 0, parts[s]).ok());
  EXPECT_EQ(*a.Total(0), *b.Total(0));
  EXPECT_EQ(*a.Total(0), 9007199254740994.0);
}

TEST(NormRoundsTest, BadReportsAreRefused) {
  NormRounds rounds({true, false}, 10);
  EXPECT_EQ(rounds.Add(1, 0, 1.0).code(), absl::StatusCode::kInvalidArgument);   // no chunks
  EXPECT_EQ(rounds.Add(2, 0, 1.0).code(), absl::StatusCode::kInvalidArgument);   // unknown
  EXPECT_EQ(rounds.Add(0, 10, 1.0).code(), absl::StatusCode::kInvalidArgument);  // future
  EXPECT_EQ(rounds.Add(0, -1, 1.0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rounds.Add(0, 0, -1.0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rounds.Add(0, 0, std::numeric_limits<double>::quiet_NaN()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NormRoundsTest, OldRoundsAreForgotten) {
  NormRounds rounds({true}, 100);
  for (int64_t c = 0; c < 20; ++c) ASSERT_TRUE(rounds.Add(0, c, c).ok());
  EXPECT_TRUE(rounds.Total(19).has_value());
  EXPECT_TRUE(rounds.Total(15).has_value());  // kept for late retries
  EXPECT_FALSE(rounds.Total(3).has_value());
  EXPECT_EQ(rounds.Add(0, 3, 1.0).code(), absl::StatusCode::kInvalidArgument);
}

TEST(NormRoundsTest, ResetForgetsEveryRound) {
  NormRounds rounds({true, true}, 100);
  ASSERT_TRUE(rounds.Add(0, 10, 1.0).ok());
  rounds.Reset(8);
  ASSERT_TRUE(rounds.Add(1, 10, 2.0).ok());
  EXPECT_FALSE(rounds.Total(10).has_value());  // server 0's report was forgotten
  ASSERT_TRUE(rounds.Add(0, 10, 3.0).ok());
  EXPECT_EQ(*rounds.Total(10), 5.0);
  EXPECT_EQ(rounds.Add(0, 7, 1.0).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pstrain
