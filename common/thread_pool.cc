#include "common/thread_pool.h"

#include <algorithm>

namespace pstrain {

ThreadPool::ThreadPool(int parallelism) {
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
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(ready, &wake));
      if (stop_) return;
      wake.seen = generation_;
    }
    RunParts();
    absl::MutexLock lock(&mu_);
    --busy_helpers_;
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
    ++generation_;
  }
  RunParts();
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* busy) { return *busy == 0; }, &busy_helpers_));
    fn_ = nullptr;
  }
  run_mu_.Unlock();
}

}  // namespace pstrain
