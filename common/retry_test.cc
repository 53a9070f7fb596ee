#include "common/retry.h"

#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

// A clock that only moves when the loop sleeps.
struct FakeTime {
  absl::Time now = absl::UnixEpoch();
  std::vector<absl::Duration> sleeps;
  RetryClock Clock() {
    RetryClock c;
    c.now = [this] { return now; };
    c.sleep = [this](absl::Duration d) {
      sleeps.push_back(d);
      now += d;
    };
    return c;
  }
};

TEST(RetryTest, SucceedsAfterRetryableFailuresWithGrowingBackoff) {
  FakeTime t;
  RetryPolicy p;
  p.clock = t.Clock();
  int calls = 0;
  const absl::Status st =
      Retry(p, [&] { return ++calls < 4 ? absl::UnavailableError("down") : absl::OkStatus(); });
  EXPECT_TRUE(st.ok());
  EXPECT_EQ(calls, 4);
  ASSERT_EQ(t.sleeps.size(), 3u);
  // 100 ms, 200 ms, 400 ms, each within +-20%.
  for (size_t i = 0; i < 3; ++i) {
    const double ms = absl::ToDoubleMilliseconds(t.sleeps[i]);
    EXPECT_GE(ms, 100 * (1 << i) * 0.8) << i;
    EXPECT_LE(ms, 100 * (1 << i) * 1.2) << i;
  }
}

TEST(RetryTest, StopsAtOnceOnAFailureTheCallerCannotFix) {
  FakeTime t;
  RetryPolicy p;
  p.clock = t.Clock();
  int calls = 0;
  const absl::Status st = Retry(p, [&] {
    ++calls;
    return absl::InvalidArgumentError("bad request");
  });
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(t.sleeps.empty());
}

TEST(RetryTest, TheWindowEndsRetriesWithTheLastFailure) {
  FakeTime t;
  RetryPolicy p;
  p.window = absl::Seconds(5);
  p.clock = t.Clock();
  int calls = 0;
  const absl::Status st = Retry(p, [&] {
    ++calls;
    return absl::UnavailableError("still down");
  });
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(st.message(), "still down");
  // No sleep ends past the window.
  EXPECT_LE(t.now - absl::UnixEpoch(), absl::Seconds(5));
  EXPECT_GT(calls, 3);
}

// An attempt that made progress (restart_window) restarts the window: the
// time it took is not time spent failing; giving up is said (on_give_up).
TEST(RetryTest, ProgressRestartsTheWindowAndGivingUpIsSaid) {
  FakeTime t;
  RetryPolicy p;
  p.window = absl::Seconds(5);
  p.max_backoff = absl::Seconds(1);
  p.clock = t.Clock();
  int calls = 0, gave_up = 0;
  p.restart_window = [&] { return calls <= 10; };  // the first ten made progress
  p.on_give_up = [&](const absl::Status& st, int attempts) {
    ++gave_up;
    EXPECT_EQ(attempts, calls);
    EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  };
  const absl::Status st = Retry(p, [&] {
    ++calls;
    t.now += absl::Seconds(2);  // each attempt takes 2 s
    return absl::UnavailableError("waiting");
  });
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  // Ten attempts of 2 s each, past the 5 s window, then two more within it.
  EXPECT_GT(calls, 10);
  EXPECT_LE(calls, 13);
  EXPECT_EQ(gave_up, 1);
}

TEST(RetryTest, RetryNowIgnoresTheWindowAndDoesNotSleep) {
  FakeTime t;
  RetryPolicy p;
  p.window = absl::ZeroDuration();
  p.clock = t.Clock();
  p.classify = [](const absl::Status& s) {
    return absl::IsDeadlineExceeded(s) ? RetryAction::kRetryNow : RetryAction::kStop;
  };
  int calls = 0;
  std::vector<int> retried;
  p.on_retry = [&](const absl::Status&, int attempts) { retried.push_back(attempts); };
  const absl::StatusOr<int> v = Retry<int>(p, [&]() -> absl::StatusOr<int> {
    if (++calls < 5) return absl::DeadlineExceededError("waited");
    return 42;
  });
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, 42);
  EXPECT_TRUE(t.sleeps.empty());
  EXPECT_EQ(retried, (std::vector<int>{1, 2, 3, 4}));
}

TEST(RetryTest, AbandonEndsTheLoopBeforeTheNextRetry) {
  FakeTime t;
  RetryPolicy p;
  p.clock = t.Clock();
  int calls = 0;
  p.abandon = [&] { return calls >= 2 ? absl::AbortedError("rolling back") : absl::OkStatus(); };
  const absl::Status st = Retry(p, [&] {
    ++calls;
    return absl::UnavailableError("down");
  });
  EXPECT_EQ(st.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace pstrain
