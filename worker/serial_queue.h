// One thread that runs tasks one after another in the order they were
// queued: the scheduler gate's asynchronous calls (worker/scheduler_gate.h)
// and each lane of the parameter client (worker/param_client.h).
#ifndef PSTRAIN_WORKER_SERIAL_QUEUE_H_
#define PSTRAIN_WORKER_SERIAL_QUEUE_H_

#include <deque>
#include <thread>

#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace pstrain {

// Thread-safe. A task runs on the queue's thread and must not call Run,
// Stop or the destructor of its own queue.
class SerialQueue {
 public:
  using Task = absl::AnyInvocable<void() &&>;

  SerialQueue();
  // Stops (see Stop) and waits for the task under way.
  ~SerialQueue();
  SerialQueue(const SerialQueue&) = delete;
  SerialQueue& operator=(const SerialQueue&) = delete;

  // Queues `task` after those queued before it; after Stop it is dropped.
  void Run(Task task);
  // No task starts from now on: the queued ones are dropped (destroyed
  // unrun, on the queue's thread or in the destructor), the one under way
  // finishes. Does not wait.
  void Stop();

 private:
  void Loop();

  absl::Mutex mu_;
  std::deque<Task> tasks_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: it starts once the rest is made
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_SERIAL_QUEUE_H_
