#include "server/nonfinite.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

std::string Name() { return "chunk 0 (w)"; }

TEST(NonfiniteRuleTest, AUnitWithANanOrAnInfIsRefusedAndCounted) {
  NonfiniteRule rule(/*allow=*/false);
  std::vector<float> g(1000, 0.5f);
  EXPECT_TRUE(rule.Admits(g, 0, 1, Name));
  g[999] = std::nanf("");
  EXPECT_FALSE(rule.Admits(g, 0, 1, Name));
  g[999] = 0.5f;
  g[0] = -std::numeric_limits<float>::infinity();
  EXPECT_FALSE(rule.Admits(g, 1, 2, Name));
  EXPECT_TRUE(rule.Admits({}, 1, 2, Name));  // an empty push holds nothing non-finite
  EXPECT_EQ(rule.skipped(), 2);
}

TEST(NonfiniteRuleTest, AJobThatAllowsThemAppliesThem) {
  NonfiniteRule rule(/*allow=*/true);
  std::vector<float> g = {1.0f, std::nanf(""), std::numeric_limits<float>::infinity()};
  EXPECT_TRUE(rule.Admits(g, 0, 1, Name));
  EXPECT_EQ(rule.skipped(), 0);
}

TEST(NonfiniteRuleTest, ManyRefusalsAskForTheirNameOnlyForTheLinesLogged) {
  NonfiniteRule rule(/*allow=*/false);
  std::vector<float> g = {std::nanf("")};
  int named = 0;
  for (int i = 0; i < 1000; ++i) {
    EXPECT_FALSE(rule.Admits(g, 0, i, [&] {
      ++named;
      return std::string("table 'words'");
    }));
  }
  EXPECT_EQ(rule.skipped(), 1000);
  EXPECT_LE(named, 5);  // at most 5 lines a minute
}

}  // namespace
}  // namespace pstrain
