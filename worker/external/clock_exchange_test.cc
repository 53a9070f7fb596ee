#include "worker/external/clock_exchange.h"

#include <thread>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

constexpr absl::Duration kLong = absl::Seconds(30);

TEST(ClockExchangeTest, AClockGoesToTheCallerAndItsEventsComeBackOnTheLoopsThread) {
  ClockExchange exchange(3);
  std::vector<std::vector<int>> ready;
  std::vector<bool> absent;
  std::vector<const float*> at;
  std::thread::id ready_on;
  absl::StatusOr<StepResult> result;
  std::thread loop([&] {
    result = exchange.RunClock({7, {4, 9}}, [&](const std::vector<int>& params,
                                                const std::vector<bool>& without,
                                                const std::vector<const float*>& where) {
      ready.push_back(params);
      absent.insert(absent.end(), without.begin(), without.end());
      at.insert(at.end(), where.begin(), where.end());
      ready_on = std::this_thread::get_id();
    });
  });
  const float caller_gradient[2] = {1.0f, 2.0f};
  const std::thread::id loop_id = loop.get_id();
  absl::StatusOr<std::optional<ClockExchange::OfferedClock>> offer = exchange.Await(kLong);
  ASSERT_TRUE(offer.ok()) << offer.status();
  ASSERT_TRUE(offer->has_value());
  EXPECT_EQ((*offer)->clock, 7);
  EXPECT_EQ((*offer)->indices, (std::vector<int64_t>{4, 9}));
  EXPECT_TRUE(exchange.GradsReady(2).ok());
  EXPECT_TRUE(exchange.GradsAbsent(1).ok());  // frozen: no gradient this clock
  EXPECT_EQ(exchange.GradsReady(1).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(exchange.GradsAt(0, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(exchange.GradsAt(0, caller_gradient).ok());  // in the caller's memory
  StepResult r;
  r.loss = 1.5f;
  r.correct = 1;
  r.predicted = 2;
  EXPECT_TRUE(exchange.ClockDone(r).ok());
  loop.join();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_FLOAT_EQ(result->loss, 1.5f);
  EXPECT_EQ(result->predicted, 2);
  std::vector<int> all;
  for (const auto& v : ready) all.insert(all.end(), v.begin(), v.end());
  EXPECT_EQ(all, (std::vector<int>{2, 1, 0}));
  EXPECT_EQ(absent, (std::vector<bool>{false, true, false}));
  EXPECT_EQ(at, (std::vector<const float*>{nullptr, nullptr, caller_gradient}));
  EXPECT_EQ(ready_on, loop_id);
}

TEST(ClockExchangeTest, CallsOutsideAClockAndRepeatsAreRefused) {
  ClockExchange exchange(2);
  EXPECT_EQ(exchange.GradsReady(0).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(exchange.ClockDone(StepResult()).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(exchange.Await(absl::Milliseconds(10)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  std::thread loop([&] { (void)exchange.RunClock({0, {}}, [](const std::vector<int>&, const std::vector<bool>&, const std::vector<const float*>&) {}); });
  ASSERT_TRUE(exchange.Await(kLong).ok());
  EXPECT_EQ(exchange.GradsReady(2).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(exchange.GradsReady(1).ok());
  EXPECT_EQ(exchange.GradsReady(1).code(), absl::StatusCode::kFailedPrecondition);
  // The clock taken is not done: asking for the next one is an error.
  EXPECT_EQ(exchange.Await(absl::Milliseconds(10)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(exchange.ClockDone(StepResult()).ok());
  loop.join();
}

TEST(ClockExchangeTest, TheLoopsEndReachesTheCaller) {
  ClockExchange done(1);
  done.End(absl::OkStatus());
  absl::StatusOr<std::optional<ClockExchange::OfferedClock>> end = done.Await(kLong);
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(end->has_value());

  ClockExchange failed(1);
  failed.End(absl::AbortedError("the job was aborted"));
  EXPECT_EQ(failed.Await(kLong).status().code(), absl::StatusCode::kAborted);
}

TEST(ClockExchangeTest, CloseEndsAClockTheCallerLeft) {
  ClockExchange exchange(1);
  absl::StatusOr<StepResult> result;
  std::thread loop([&] { result = exchange.RunClock({3, {1}}, [](const std::vector<int>&, const std::vector<bool>&, const std::vector<const float*>&) {}); });
  ASSERT_TRUE(exchange.Await(kLong).ok());
  exchange.Close(absl::CancelledError("the script stopped"));
  loop.join();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(exchange.RunClock({4, {}}, [](const std::vector<int>&, const std::vector<bool>&, const std::vector<const float*>&) {}).status().code(),
            absl::StatusCode::kCancelled);
}

TEST(ClockExchangeTest, ACallAfterTheClockWasClosedUnderTheCallerSaysWhy) {
  // The job aborted while a backward ran: its later hooks and step() are
  // told so (ABORTED, JobAborted in Python), not that they misused a clock.
  ClockExchange exchange(2);
  std::thread loop([&] { (void)exchange.RunClock({5, {}}, [](const std::vector<int>&, const std::vector<bool>&, const std::vector<const float*>&) {}); });
  ASSERT_TRUE(exchange.Await(kLong).ok());
  EXPECT_TRUE(exchange.GradsReady(0).ok());
  exchange.Close(absl::AbortedError("the job was aborted"));
  loop.join();
  EXPECT_EQ(exchange.GradsReady(1).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(exchange.ClockDone(StepResult()).code(), absl::StatusCode::kAborted);
  exchange.End(absl::AbortedError("the job was aborted: server 1 declared dead"));
  absl::Status late = exchange.GradsAbsent(1);
  EXPECT_EQ(late.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(late.message(), "the job was aborted: server 1 declared dead");
}

}  // namespace
}  // namespace pstrain
