#include "worker/weight_prefetch.h"

#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "worker/testing/fakes.h"

namespace pstrain {
namespace {

std::vector<ParamInfo> TwoParams() {
  ParamInfo a, b;
  a.name = "a";
  a.numel = 3;
  b.name = "b";
  b.numel = 2;
  return {a, b};
}

TEST(WeightPrefetchTest, TakeSwapsInTheClocksWeights) {
  auto cpu = kernels::MakeCpuBackend(1);
  testing::CallLog log;
  testing::FakeParamClient client(&log, 0, false);
  WeightPrefetch prefetch(TwoParams(), cpu.get());
  ParamBuffers weights = {{0, 0, 0}, {0, 0}};
  PulledClocks clocks;
  EXPECT_FALSE(prefetch.Has(5));
  prefetch.Start(&client, 5, 4);
  EXPECT_TRUE(prefetch.Has(5));
  EXPECT_FALSE(prefetch.Has(6));
  ASSERT_TRUE(prefetch.Take(&client, 5, &weights, &clocks).ok());
  EXPECT_EQ(weights, (ParamBuffers{{5, 5, 5}, {5, 5}}));  // the fake fills the clock
  EXPECT_EQ(clocks.applied, (std::vector<int64_t>{5}));          // and says so
  EXPECT_FALSE(prefetch.Has(5));                          // taken
  prefetch.Start(&client, 6, 5);
  ASSERT_TRUE(prefetch.Take(&client, 6, &weights, &clocks).ok());
  EXPECT_EQ(weights[1], (std::vector<float>{6, 6}));
  EXPECT_EQ(log, (testing::CallLog{"g0 pull 5 min 4", "g0 pull 6 min 5"}));
}

TEST(WeightPrefetchTest, AFailedPullLeavesTheWeightsAndSaysWhy) {
  testing::CallLog log;
  testing::FakeParamClient client(&log, 0, false, [](const std::string&) {
    return absl::UnavailableError("server 1 unreachable");
  });
  WeightPrefetch prefetch(TwoParams(), nullptr);
  ParamBuffers weights = {{1, 2, 3}, {4, 5}};
  PulledClocks clocks;
  prefetch.Start(&client, 2, 1);
  const absl::Status st = prefetch.Take(&client, 2, &weights, &clocks);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(weights, (ParamBuffers{{1, 2, 3}, {4, 5}}));
  EXPECT_FALSE(prefetch.Has(2));
  EXPECT_EQ(prefetch.Take(&client, 2, &weights, &clocks).code(), absl::StatusCode::kInternal);
}

TEST(WeightPrefetchTest, ANewStartDropsThePullInFlight) {
  testing::CallLog log;
  testing::FakeParamClient client(&log, 0, false);
  WeightPrefetch prefetch(TwoParams(), nullptr);
  prefetch.Start(&client, 3, 2);
  prefetch.Start(&client, 4, 3);
  EXPECT_FALSE(prefetch.Has(3));
  ParamBuffers weights = {{0, 0, 0}, {0, 0}};
  PulledClocks clocks;
  ASSERT_TRUE(prefetch.Take(&client, 4, &weights, &clocks).ok());
  EXPECT_EQ(weights[0][0], 4.0f);
  prefetch.Start(&client, 5, 4);
  prefetch.Drop(&client);
  EXPECT_FALSE(prefetch.Has(5));
}

}  // namespace
}  // namespace pstrain
