#include "common/thread_pool.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

// Every index is visited exactly once, in ranges of at least the grain.
TEST(ThreadPoolTest, CoversTheRangeOnce) {
  ThreadPool pool(4);
  for (int64_t n : {1, 7, 1000, 100003}) {
    std::vector<std::atomic<int>> hits(n);
    std::atomic<int> ranges{0};
    pool.ParallelFor(n, 100, [&](int64_t begin, int64_t end) {
      EXPECT_LT(begin, end);
      if (n >= 100) {
        EXPECT_GE(end - begin, 100 / 2);
      }
      for (int64_t i = begin; i < end; ++i) hits[i]++;
      ranges++;
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
    EXPECT_LE(ranges.load(), 4);
  }
}

TEST(ThreadPoolTest, UsesSeveralThreads) {
  ThreadPool pool(3);
  std::mutex mu;
  std::vector<std::thread::id> ids;
  std::condition_variable all_started;
  // Each range waits (up to 30 s) until all three have started, so no
  // thread can run two of them, however late the pool's threads wake on a
  // loaded machine.
  pool.ParallelFor(3, 1, [&](int64_t, int64_t) {
    std::unique_lock<std::mutex> lock(mu);
    ids.push_back(std::this_thread::get_id());
    all_started.notify_all();
    all_started.wait_for(lock, std::chrono::seconds(30), [&] { return ids.size() == 3; });
  });
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_NE(ids[0], ids[1]);
  EXPECT_NE(ids[1], ids[2]);
  EXPECT_NE(ids[0], ids[2]);
}

// Callers racing for the pool all finish; the loser runs inline.
TEST(ThreadPoolTest, ConcurrentCallers) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int rep = 0; rep < 200; ++rep) {
        pool.ParallelFor(1000, 10, [&](int64_t b, int64_t e) { sum += e - b; });
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(sum.load(), 4 * 200 * 1000);
}

// With a spin, loops back to back (as a worker's step runs them), from
// several callers at once, and loops after a pause longer than the spin
// (the helpers asleep again) cover their ranges once, and the pool ends.
TEST(ThreadPoolTest, SpinningHelpersMissNoLoop) {
  ThreadPool pool(3, absl::Microseconds(100));
  std::atomic<int64_t> sum{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c) {
    callers.emplace_back([&] {
      for (int rep = 0; rep < 300; ++rep) {
        pool.ParallelFor(999, 10, [&](int64_t b, int64_t e) { sum += e - b; });
        if (rep % 100 == 0) absl::SleepFor(absl::Milliseconds(2));
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(sum.load(), 3 * 300 * 999);
}

TEST(ThreadPoolTest, SingleThreadRunsInline) {
  ThreadPool pool(1);
  const auto me = std::this_thread::get_id();
  pool.ParallelFor(1 << 20, 1, [&](int64_t b, int64_t e) {
    EXPECT_EQ(std::this_thread::get_id(), me);
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 1 << 20);
  });
}

}  // namespace
}  // namespace pstrain
