// A fixed pool of threads that splits one loop at a time into contiguous
// ranges. Used by the servers' update loops (--server_threads) and the CPU
// backend's ops (ps_worker --compute_threads).
#ifndef PSTRAIN_COMMON_THREAD_POOL_H_
#define PSTRAIN_COMMON_THREAD_POOL_H_

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace pstrain {

// Thread-safe. ParallelFor allocates nothing.
class ThreadPool {
 public:
  // `parallelism` ways in all: the calling thread and parallelism - 1 helpers.
  // parallelism <= 1 runs every loop on the caller. With `spin`, a helper
  // that finished a loop, and a caller waiting for the helpers, yield in a
  // loop for that long before they sleep: loops that come back to back (a
  // worker's step, CPU backend) then cost no wake-up each.
  explicit ThreadPool(int parallelism, absl::Duration spin = absl::ZeroDuration());
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Calls fn(begin, end) over disjoint ranges covering [0, n), each at least
  // `min_grain` long (but the last), and returns when all are done. While
  // another caller's loop runs, the whole range runs on this caller: the
  // pool never queues, so concurrent callers never wait on each other.
  void ParallelFor(int64_t n, int64_t min_grain, absl::FunctionRef<void(int64_t, int64_t)> fn);

  int parallelism() const { return static_cast<int>(threads_.size()) + 1; }

 private:
  // Yields until done() or spin_ has passed.
  template <typename Done>
  void SpinUntil(Done done) const;
  void HelperLoop();
  // Runs parts of the current loop until none is left.
  void RunParts();

  absl::Mutex run_mu_;  // held by the caller whose loop the pool runs
  absl::Mutex mu_;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int busy_helpers_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // The current loop; written under mu_ before generation_ moves.
  const absl::FunctionRef<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t parts_ = 0;
  std::atomic<int64_t> next_part_{0};
  // generation_ and busy_helpers_, readable without mu_ for the spins.
  std::atomic<int64_t> posted_{0};
  std::atomic<int> running_{0};
  const absl::Duration spin_;
  std::vector<std::thread> threads_;  // last: they start running at once
};

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_THREAD_POOL_H_
