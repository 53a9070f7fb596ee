// SerialQueue: tasks run in order, one at a time, on one thread; Stop drops
// what is still queued and lets the task under way finish.
#include "worker/serial_queue.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(SerialQueueTest, RunsTasksInTheOrderQueuedOnOneThread) {
  absl::Mutex mu;
  std::vector<int> ran;
  std::vector<std::thread::id> threads;
  absl::Notification last;
  {
    SerialQueue queue;
    for (int i = 0; i < 5; ++i) {
      queue.Run([&, i] {
        absl::MutexLock lock(&mu);
        ran.push_back(i);
        threads.push_back(std::this_thread::get_id());
        if (i == 4) last.Notify();
      });
    }
    last.WaitForNotification();
  }
  EXPECT_EQ(ran, (std::vector<int>{0, 1, 2, 3, 4}));
  for (const std::thread::id& t : threads) {
    EXPECT_EQ(t, threads[0]);
    EXPECT_NE(t, std::this_thread::get_id());
  }
}

TEST(SerialQueueTest, StopLetsTheTaskUnderWayFinishAndDropsTheQueuedOnes) {
  absl::Notification started, release;
  bool first_done = false, second_ran = false;
  // A move-only task (a promise's kind): dropped unrun, it is destroyed.
  auto dropped = std::make_shared<int>(0);
  {
    SerialQueue queue;
    queue.Run([&] {
      started.Notify();
      release.WaitForNotification();
      first_done = true;
    });
    queue.Run([&second_ran, owned = std::make_unique<int>(1)] { second_ran = true; });
    queue.Run([keep = dropped] {});
    started.WaitForNotification();
    queue.Stop();
    queue.Run([&second_ran] { second_ran = true; });  // after Stop: dropped
    release.Notify();
  }  // joins
  EXPECT_TRUE(first_done);
  EXPECT_FALSE(second_ran);
  EXPECT_EQ(dropped.use_count(), 1);  // the dropped task's copy is gone
}

}  // namespace
}  // namespace pstrain
