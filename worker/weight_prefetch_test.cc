#include "worker/weight_prefetch.h"

#include <atomic>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

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

// A fake pull: every weight becomes the clock asked for, plus min_clock / 10.
absl::Status FillWithClock(int64_t clock, int64_t min_clock, WeightPrefetch::Weights* into) {
  for (auto& w : *into) {
    for (float& v : w) v = static_cast<float>(clock) + static_cast<float>(min_clock) / 10;
  }
  return absl::OkStatus();
}

TEST(WeightPrefetchTest, TakeSwapsInTheClocksWeights) {
  auto cpu = kernels::MakeCpuBackend(1);
  WeightPrefetch prefetch(TwoParams(), cpu.get());
  WeightPrefetch::Weights weights = {{0, 0, 0}, {0, 0}};
  EXPECT_FALSE(prefetch.Has(5));
  prefetch.Start(5, 4, FillWithClock);
  EXPECT_TRUE(prefetch.Has(5));
  EXPECT_FALSE(prefetch.Has(6));
  ASSERT_TRUE(prefetch.Take(5, &weights).ok());
  EXPECT_EQ(weights, (WeightPrefetch::Weights{{5.4f, 5.4f, 5.4f}, {5.4f, 5.4f}}));
  EXPECT_FALSE(prefetch.Has(5));  // taken
  // The old buffers serve the next pull; the taken weights stay as they were.
  prefetch.Start(6, 5, FillWithClock);
  ASSERT_TRUE(prefetch.Take(6, &weights).ok());
  EXPECT_EQ(weights[1], (std::vector<float>{6.5f, 6.5f}));
}

TEST(WeightPrefetchTest, AFailedPullLeavesTheWeightsAndSaysWhy) {
  WeightPrefetch prefetch(TwoParams(), nullptr);
  WeightPrefetch::Weights weights = {{1, 2, 3}, {4, 5}};
  prefetch.Start(2, 1, [](int64_t, int64_t, WeightPrefetch::Weights* into) {
    (*into)[0][0] = 99;  // a half-done pull
    return absl::UnavailableError("server 1 unreachable");
  });
  const absl::Status st = prefetch.Take(2, &weights);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(weights, (WeightPrefetch::Weights{{1, 2, 3}, {4, 5}}));
  EXPECT_FALSE(prefetch.Has(2));
  EXPECT_EQ(prefetch.Take(2, &weights).code(), absl::StatusCode::kInternal);
}

TEST(WeightPrefetchTest, StartAndDropWaitForAPullInFlight) {
  WeightPrefetch prefetch(TwoParams(), nullptr);
  absl::Notification release;
  std::atomic<int> finished{0};
  prefetch.Start(1, 0, [&](int64_t, int64_t, WeightPrefetch::Weights*) {
    release.WaitForNotification();
    ++finished;
    return absl::OkStatus();
  });
  std::thread releaser([&] { release.Notify(); });
  prefetch.Drop();  // returns only once the pull has ended
  EXPECT_EQ(finished.load(), 1);
  EXPECT_FALSE(prefetch.Has(1));
  releaser.join();
  // A new Start replaces the old one.
  prefetch.Start(3, 2, FillWithClock);
  prefetch.Start(4, 3, FillWithClock);
  EXPECT_FALSE(prefetch.Has(3));
  WeightPrefetch::Weights weights = {{0, 0, 0}, {0, 0}};
  ASSERT_TRUE(prefetch.Take(4, &weights).ok());
  EXPECT_EQ(weights[0][0], 4.3f);
}

}  // namespace
}  // namespace pstrain
