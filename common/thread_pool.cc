#include "common/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace pstrain {

ThreadPool::ThreadPool(int parallelism, absl::Duration spin) : spin_(spin) {
  for (int i = 1; i < parallelism; ++i) threads_.emplace_back([this] { HelperLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void ThreadPool::RunParts() {
  while (true) {
    const int64_t part = next_part_.fetch_add(1, std::memory_order_relaxed);
    if (part >= parts_) return;
    const int64_t begin = n_ * part / parts_;
    const int64_t end = n_ * (part + 1) / parts_;
    (*fn_)(begin, end);
  }
}

template <typename Done>
void ThreadPool::SpinUntil(Done done) const {
  if (spin_ <= absl::ZeroDuration()) return;
  using Clock = std::chrono::steady_clock;  // not the wall clock: it may jump
  const Clock::time_point until = Clock::now() + absl::ToChronoNanoseconds(spin_);
  while (!done() && Clock::now() < until) std::this_thread::yield();
}

void ThreadPool::HelperLoop() {
  struct Wake {
    ThreadPool* pool;
    int64_t seen;  // the generation this helper last ran
  } wake{this, 0};
  // absl::Condition evaluates it with mu_ held.
  auto ready = +[](Wake* w) {
    w->pool->mu_.AssertHeld();
    return w->pool->stop_ || w->pool->generation_ != w->seen;
  };
  while (true) {
    SpinUntil([&] { return posted_.load(std::memory_order_acquire) != wake.seen; });
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(ready, &wake));
      if (stop_) return;
      wake.seen = generation_;
    }
    RunParts();
    absl::MutexLock lock(&mu_);
    --busy_helpers_;
    running_.fetch_sub(1, std::memory_order_release);
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t min_grain,
                             absl::FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  const int64_t parts =
      std::min<int64_t>(parallelism(), std::max<int64_t>(1, n / std::max<int64_t>(1, min_grain)));
  if (parts <= 1 || !run_mu_.TryLock()) {
    fn(0, n);
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    fn_ = &fn;
    n_ = n;
    parts_ = parts;
    next_part_.store(0, std::memory_order_relaxed);
    busy_helpers_ = static_cast<int>(threads_.size());
    running_.store(busy_helpers_, std::memory_order_relaxed);
    ++generation_;
    posted_.store(generation_, std::memory_order_release);
  }
  RunParts();
  SpinUntil([this] { return running_.load(std::memory_order_acquire) == 0; });
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* busy) { return *busy == 0; }, &busy_helpers_));
    fn_ = nullptr;
  }
  run_mu_.Unlock();
}

}  // namespace pstrain
