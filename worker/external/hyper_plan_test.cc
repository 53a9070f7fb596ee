#include "worker/external/hyper_plan.h"

#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(HyperPlanTest, ASettingHoldsFromItsClockOn) {
  HyperPlan plan;
  EXPECT_EQ(plan.At(0), "");
  plan.Set(3, "a");
  plan.Set(4, "a");
  plan.Set(7, "b");
  EXPECT_EQ(plan.At(2), "");
  EXPECT_EQ(plan.At(3), "a");
  EXPECT_EQ(plan.At(6), "a");
  EXPECT_EQ(plan.At(7), "b");
  EXPECT_EQ(plan.At(100), "b");
}

// After a rollback the script's scheduler has moved on; a redone clock
// keeps the values it was pushed with the first time.
TEST(HyperPlanTest, ARedoneClockKeepsItsFirstValues) {
  HyperPlan plan;
  for (int64_t clock = 0; clock < 10; ++clock) plan.Set(clock, clock < 5 ? "early" : "late");
  plan.Set(3, "later still");
  plan.Set(9, "later still");
  EXPECT_EQ(plan.At(3), "early");
  EXPECT_EQ(plan.At(9), "late");
  plan.Set(10, "");  // back to the job's
  EXPECT_EQ(plan.At(10), "");
  EXPECT_EQ(plan.At(9), "late");
}

TEST(HyperPlanTest, OldSettingsAreForgottenButTheOneInForce) {
  HyperPlan plan;
  plan.Set(0, "a");
  plan.Set(1, "b");
  const int64_t far = 1 + HyperPlan::kKeepClocks + 5;
  plan.Set(far, "c");
  EXPECT_EQ(plan.At(0), "");   // forgotten
  EXPECT_EQ(plan.At(6), "b");  // in force kKeepClocks before `far`
  EXPECT_EQ(plan.At(far), "c");
}

}  // namespace
}  // namespace pstrain
