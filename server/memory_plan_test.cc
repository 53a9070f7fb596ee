#include "server/memory_plan.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// Issue 24's server: 1 MiB chunks (Adam and a BSP round sum: 4 MiB slabs
// and a page of gaps) with an 80 MiB budget.
TEST(MemoryPlanTest, EighthsOfALargeBudgetGoInFlightAndTheRestToSlabs) {
  const ServerMemoryNeeds needs{4 * kMiB + 4096 * 4, kMiB};
  absl::StatusOr<ServerMemoryPlan> plan = PlanServerMemory(80 * kMiB, needs);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->requests, 10 * kMiB);
  EXPECT_EQ(plan->replies, 10 * kMiB);
  EXPECT_EQ(plan->slabs, 60 * kMiB);
}

TEST(MemoryPlanTest, TheWorkersShareTheRequestsAtLeastAMessageEach) {
  ServerMemoryNeeds needs{4 * kMiB, kMiB};
  needs.workers = 4;
  absl::StatusOr<ServerMemoryPlan> plan = PlanServerMemory(80 * kMiB, needs);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->push_window, 10 * kMiB / 4);
  needs.workers = 64;
  plan = PlanServerMemory(80 * kMiB, needs);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->push_window, kMiB);
}

TEST(MemoryPlanTest, ASmallBudgetStillHoldsOneMessageEachWay) {
  const ServerMemoryNeeds needs{4 * kMiB, kMiB};
  absl::StatusOr<ServerMemoryPlan> plan = PlanServerMemory(7 * kMiB, needs);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->requests, kMiB);
  EXPECT_EQ(plan->replies, kMiB);
  EXPECT_EQ(plan->slabs, 5 * kMiB);
}

TEST(MemoryPlanTest, TheSharesAddUpToTheBudget) {
  const ServerMemoryNeeds needs{266240, 65536};
  for (int64_t budget = MinimumServerBudget(needs); budget < 4 * kMiB; budget += 4093) {
    absl::StatusOr<ServerMemoryPlan> plan = PlanServerMemory(budget, needs);
    ASSERT_TRUE(plan.ok()) << budget;
    EXPECT_EQ(plan->slabs + plan->requests + plan->replies, budget);
    EXPECT_GE(plan->slabs, needs.largest_slab);
    EXPECT_GE(plan->requests, needs.largest_message);
    EXPECT_GE(plan->replies, needs.largest_message);
  }
}

// The minimum named in the error works, one byte less does not, and so
// does every budget above it (the slabs' share never shrinks).
TEST(MemoryPlanTest, TheMinimumIsExactAndEveryLargerBudgetWorks) {
  for (const ServerMemoryNeeds needs :
       {ServerMemoryNeeds{4 * kMiB + 16384, kMiB}, ServerMemoryNeeds{266240, 65536},
        ServerMemoryNeeds{4096, 1024}, ServerMemoryNeeds{12 * kMiB + 8192, 1000},
        ServerMemoryNeeds{4096 * 3, 0}}) {
    const int64_t least = MinimumServerBudget(needs);
    EXPECT_TRUE(PlanServerMemory(least, needs).ok()) << needs.largest_slab;
    const absl::StatusOr<ServerMemoryPlan> below = PlanServerMemory(least - 1, needs);
    EXPECT_EQ(below.status().code(), absl::StatusCode::kInvalidArgument) << needs.largest_slab;
    for (int64_t budget = least; budget < least + 64; ++budget) {
      EXPECT_TRUE(PlanServerMemory(budget, needs).ok()) << budget;
    }
  }
}

TEST(MemoryPlanTest, NoBudgetIsRefused) {
  const ServerMemoryNeeds needs{4096, 1024};
  EXPECT_EQ(PlanServerMemory(0, needs).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanServerMemory(-5, needs).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pstrain
