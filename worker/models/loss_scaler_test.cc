#include "worker/models/loss_scaler.h"

#include <limits>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(LossScalerTest, UnscalesSkipsOnOverflowAndGrows) {
  LossScaler s(1024.0f, /*growth_interval=*/3);
  std::vector<std::vector<float>> g = {{2048.0f, -512.0f}, {1.0f}};
  EXPECT_TRUE(s.Unscale(&g));
  EXPECT_EQ(g[0][0], 2.0f);
  EXPECT_EQ(g[0][1], -0.5f);
  EXPECT_EQ(g[1][0], 1.0f / 1024);
  // An overflow: the step is skipped and the scale halves.
  g = {{1.0f, std::numeric_limits<float>::infinity()}};
  EXPECT_FALSE(s.Unscale(&g));
  EXPECT_EQ(s.scale(), 512.0f);
  g = {{std::numeric_limits<float>::quiet_NaN()}};
  EXPECT_FALSE(s.Unscale(&g));
  EXPECT_EQ(s.scale(), 256.0f);
  EXPECT_EQ(s.overflows(), 2);
  // Three clean steps in a row double it.
  for (int i = 0; i < 3; ++i) {
    g = {{1.0f}};
    EXPECT_TRUE(s.Unscale(&g));
  }
  EXPECT_EQ(s.scale(), 512.0f);
  // It never drops below 1.
  LossScaler low(1.0f);
  g = {{std::numeric_limits<float>::infinity()}};
  EXPECT_FALSE(low.Unscale(&g));
  EXPECT_EQ(low.scale(), 1.0f);
}

}  // namespace
}  // namespace pstrain
