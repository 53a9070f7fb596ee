#include "common/log_limit.h"

#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(LogLimitTest, AtMostBurstLinesAPeriodAndTheNextSaysHowManyWereHeldBack) {
  LogLimit limit(3, absl::Seconds(60));
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  int64_t held = -1;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(limit.Allow(&held, t0 + absl::Seconds(i)));
    EXPECT_EQ(held, 0);
  }
  for (int i = 0; i < 3000; ++i) EXPECT_FALSE(limit.Allow(&held, t0 + absl::Seconds(10)));
  EXPECT_EQ(limit.held_back(), 3000);
  // The next period: the first line out carries the count, then it starts again.
  ASSERT_TRUE(limit.Allow(&held, t0 + absl::Seconds(60)));
  EXPECT_EQ(held, 3000);
  ASSERT_TRUE(limit.Allow(&held, t0 + absl::Seconds(61)));
  EXPECT_EQ(held, 0);
  EXPECT_EQ(limit.held_back(), 0);
}

TEST(LogLimitTest, AFloodAddsABoundedNumberOfLines) {
  LogLimit limit(5, absl::Minutes(1));
  const absl::Time t0 = absl::FromUnixSeconds(5000);
  int lines = 0;
  int64_t held = 0, reported = 0;
  // 100,000 events over ten minutes: at most 5 lines a minute.
  for (int i = 0; i < 100000; ++i) {
    if (limit.Allow(&held, t0 + absl::Milliseconds(6 * i))) {
      ++lines;
      reported += held;
    }
  }
  EXPECT_LE(lines, 5 * 10 + 5);
  EXPECT_EQ(lines + reported + limit.held_back(), 100000);  // nothing uncounted
}

}  // namespace
}  // namespace pstrain
