#include "worker/serial_queue.h"

#include <utility>

namespace pstrain {

SerialQueue::SerialQueue() : thread_([this] { Loop(); }) {}

SerialQueue::~SerialQueue() {
  Stop();
  thread_.join();
}

void SerialQueue::Run(Task task) {
  absl::MutexLock lock(&mu_);
  if (!stop_) tasks_.push_back(std::move(task));
}

void SerialQueue::Stop() {
  absl::MutexLock lock(&mu_);
  stop_ = true;
}

void SerialQueue::Loop() {
  while (true) {
    Task task;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !tasks_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (stop_) return;  // tasks still queued go with the queue
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    std::move(task)();
  }
}

}  // namespace pstrain
