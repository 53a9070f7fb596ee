#include "server/byte_budget.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(ByteBudgetTest, TakesWhatFitsAndRefusesMore) {
  ByteBudget budget(100);
  EXPECT_TRUE(budget.Take(60));
  EXPECT_TRUE(budget.Take(40));
  EXPECT_FALSE(budget.Take(1));
  EXPECT_EQ(budget.in_use(), 100);
  budget.Give(40);
  EXPECT_FALSE(budget.Take(41));
  EXPECT_TRUE(budget.Take(40));
  EXPECT_EQ(budget.peak(), 100);
}

TEST(ByteBudgetTest, OneItemLargerThanTheLimitGoesAlone) {
  ByteBudget budget(100);
  EXPECT_TRUE(budget.Take(250));
  EXPECT_FALSE(budget.Take(1));
  budget.Give(250);
  EXPECT_EQ(budget.in_use(), 0);
  EXPECT_TRUE(budget.Take(1));
  EXPECT_FALSE(budget.Take(250));
  EXPECT_EQ(budget.peak(), 250);
}

TEST(ByteBudgetTest, ANewLimitAppliesToWhatComesNext) {
  ByteBudget budget;
  EXPECT_TRUE(budget.Take(1 << 30));
  budget.SetLimit(10);
  EXPECT_EQ(budget.limit(), 10);
  EXPECT_FALSE(budget.Take(1));
  budget.Give(1 << 30);
  EXPECT_TRUE(budget.Take(10));
  EXPECT_FALSE(budget.Take(1));
}

// Threads taking and giving back at once never hold more than the limit.
TEST(ByteBudgetTest, ConcurrentTakersStayWithinTheLimit) {
  ByteBudget budget(1000);
  std::atomic<int64_t> held{0};
  std::atomic<int64_t> most{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        const int64_t bytes = 100 + 50 * t;
        if (!budget.Take(bytes)) continue;
        const int64_t now = held += bytes;
        int64_t seen = most;
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        absl::SleepFor(absl::Microseconds(50));  // held a while, as a reply is
        held -= bytes;
        budget.Give(bytes);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LE(most.load(), 1000);
  EXPECT_LE(budget.peak(), 1000);
  EXPECT_GT(budget.peak(), 250);  // the threads did overlap
  EXPECT_EQ(budget.in_use(), 0);
}

}  // namespace
}  // namespace pstrain
