// The next clock's weights, pulled on a thread of their own while the
// current clock computes (ps_worker --overlap under SSP and ASP).
//
// Under staleness s >= 1 the read guarantee for clock c + 1 asks only for
// the updates of clocks before c + 1 - s <= c. When clock c starts
// computing, this worker has pushed every clock before c, so the pull for
// c + 1 can go out then instead of after clock c's push: it waits at the
// servers only for slower workers, and the step no longer waits for it.
// (Under BSP, s = 0, clock c + 1 reads clock c's own update: no prefetch.)
#ifndef PSTRAIN_WORKER_WEIGHT_PREFETCH_H_
#define PSTRAIN_WORKER_WEIGHT_PREFETCH_H_

#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "common/params.h"
#include "kernels/backend.h"

namespace pstrain {

// One thread at a time (the training loop's); the pull runs on its own.
class WeightPrefetch {
 public:
  using Weights = std::vector<std::vector<float>>;
  // Reads the weights for `clock` with read guarantee `min_clock` into *into.
  using Pull = std::function<absl::Status(int64_t clock, int64_t min_clock, Weights* into)>;

  // Buffers shaped like `params`, pinned for `backend`'s copies (it may be
  // null, and must outlive this).
  WeightPrefetch(const std::vector<ParamInfo>& params, kernels::Backend* backend);
  // Waits for a pull in flight.
  ~WeightPrefetch();
  WeightPrefetch(const WeightPrefetch&) = delete;
  WeightPrefetch& operator=(const WeightPrefetch&) = delete;

  // Starts pulling the weights of `clock` (dropping a pull still in flight).
  void Start(int64_t clock, int64_t min_clock, Pull pull);
  // Whether the last Start was for `clock` and has not been taken or dropped.
  bool Has(int64_t clock) const { return started_ && clock_ == clock; }
  // Waits for the pull Start(clock) began. On success its weights are
  // swapped into *weights (same shapes; their old buffers become the next
  // pull's), else *weights is untouched and the pull's error returned.
  // REQUIRES: Has(clock).
  absl::Status Take(int64_t clock, Weights* weights);
  // Waits for a pull in flight and forgets it.
  void Drop();

 private:
  kernels::Backend* const backend_;
  Weights buffers_;
  std::thread thread_;
  bool started_ = false;
  int64_t clock_ = -1;
  absl::Status status_;  // of the pull, written by thread_ before it ends
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_WEIGHT_PREFETCH_H_
