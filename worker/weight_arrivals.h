// Which parameters of a pull have landed (BSP with --overlap: the forward of
// a layer waits for that layer's weights only, not for the whole model).
//
// The pull's thread reports each parameter once all of its chunks are in
// (Landed) and the pull's end (Finish); the step's thread waits for the
// parameters a layer needs (Await) and goes on while the later layers'
// weights still arrive. A pull that fails wakes every waiter with its
// error. Thread-safe.
#ifndef PSTRAIN_WORKER_WEIGHT_ARRIVALS_H_
#define PSTRAIN_WORKER_WEIGHT_ARRIVALS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace pstrain {

class WeightArrivals {
 public:
  // A worker's `params` parameters; nothing is awaited until the first Begin.
  explicit WeightArrivals(int params) : params_(params) {}

  // A pull of every parameter starts: none has landed. Returns the pull's
  // number, which its reports carry: those of an earlier pull are ignored.
  int64_t Begin();
  // Every chunk of parameter `param` of pull `pull` has been copied into
  // its buffer.
  void Landed(int64_t pull, int param);
  // Pull `pull` ended with `status`: OK means every parameter landed
  // (reported or not); else a waiter for parameters that did not land gets
  // the error.
  void Finish(int64_t pull, const absl::Status& status);
  // The step's weights come from elsewhere (a prefetch, the cache, another
  // client): nothing is awaited until the next Begin.
  void Forget();
  // Waits until each of `params` has landed (OK) or the pull failed first
  // (its error). OK at once when no pull is under way and none failed.
  absl::Status Await(const std::vector<int>& params);
  // The time Await spent waiting since the last call (for the clock's split).
  absl::Duration TakeWaited();

 private:
  bool LandedLocked(const std::vector<int>& params) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int params_;
  mutable absl::Mutex mu_;
  bool pulling_ ABSL_GUARDED_BY(mu_) = false;
  int64_t pull_ ABSL_GUARDED_BY(mu_) = 0;  // the last Begin's number
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> landed_ ABSL_GUARDED_BY(mu_);  // empty: every one (no pull yet)
  absl::Duration waited_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_WEIGHT_ARRIVALS_H_
