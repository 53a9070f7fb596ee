#include "worker/weight_arrivals.h"

#include <atomic>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(WeightArrivalsTest, NothingIsAwaitedBeforeAPull) {
  WeightArrivals arrivals(3);
  EXPECT_TRUE(arrivals.Await({0, 1, 2}).ok());
}

TEST(WeightArrivalsTest, AWaiterGoesOnOnceItsParametersLandedNotTheOthers) {
  WeightArrivals arrivals(3);
  const int64_t pull = arrivals.Begin();
  std::atomic<int> passed{-1};
  std::thread step([&] {
    EXPECT_TRUE(arrivals.Await({0}).ok());
    passed = 0;
    EXPECT_TRUE(arrivals.Await({1, 2}).ok());
    passed = 1;
  });
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(passed, -1);  // parameter 0 has not landed
  arrivals.Landed(pull, 0);
  while (passed < 0) absl::SleepFor(absl::Milliseconds(1));
  arrivals.Landed(pull, 2);
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(passed, 0);  // 1 is still missing
  arrivals.Landed(pull, 1);
  step.join();
  EXPECT_EQ(passed, 1);
  EXPECT_GT(arrivals.TakeWaited(), absl::Milliseconds(30));
  EXPECT_EQ(arrivals.TakeWaited(), absl::ZeroDuration());
}

TEST(WeightArrivalsTest, AFailedPullWakesTheWaitersOfWhatDidNotLand) {
  WeightArrivals arrivals(2);
  const int64_t pull = arrivals.Begin();
  arrivals.Landed(pull, 0);
  std::thread failing([&] {
    absl::SleepFor(absl::Milliseconds(10));
    arrivals.Finish(pull, absl::UnavailableError("server 1 went away"));
  });
  EXPECT_EQ(arrivals.Await({1}).code(), absl::StatusCode::kUnavailable);
  failing.join();
  EXPECT_TRUE(arrivals.Await({0}).ok());  // it did land
  // The next pull starts clean.
  const int64_t next = arrivals.Begin();
  arrivals.Finish(next, absl::OkStatus());  // OK: every parameter is in
  EXPECT_TRUE(arrivals.Await({0, 1}).ok());
}

// An abandoned pull's late reports do not speak for the next one, and a
// step whose weights came from elsewhere awaits nothing.
TEST(WeightArrivalsTest, OnlyTheLastPullCounts) {
  WeightArrivals arrivals(2);
  const int64_t old = arrivals.Begin();
  const int64_t now = arrivals.Begin();
  arrivals.Landed(old, 0);
  arrivals.Finish(old, absl::OkStatus());
  arrivals.Landed(now, 1);
  std::atomic<bool> passed{false};
  std::thread step([&] {
    EXPECT_TRUE(arrivals.Await({0}).ok());
    passed = true;
  });
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_FALSE(passed) << "parameter 0 of the last pull has not landed";
  arrivals.Landed(now, 0);
  step.join();
  arrivals.Begin();
  arrivals.Forget();
  EXPECT_TRUE(arrivals.Await({0, 1}).ok());
}

}  // namespace
}  // namespace pstrain
