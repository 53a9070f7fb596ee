// The next clock's weights, pulled while the current clock computes (the
// clock loop under SSP and ASP with --overlap).
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
#include <vector>

#include "absl/status/status.h"
#include "common/params.h"
#include "kernels/backend.h"
#include "worker/param_client.h"

namespace pstrain {

// A second set of weight buffers and the pull filling it. One thread.
class WeightPrefetch {
 public:
  // Buffers shaped like `params`, pinned for `backend`'s copies (it may be
  // null, and must outlive this).
  WeightPrefetch(const std::vector<ParamInfo>& params, kernels::Backend* backend);
  // REQUIRES: no pull in flight (Take or Drop it, or end its client first).
  ~WeightPrefetch();
  WeightPrefetch(const WeightPrefetch&) = delete;
  WeightPrefetch& operator=(const WeightPrefetch&) = delete;

  // Starts pulling the weights of `clock` through `client` (dropping a pull
  // still in flight there first).
  void Start(ParamClient* client, int64_t clock, int64_t min_clock);
  // Whether the last Start was for `clock` and has not been taken or dropped.
  bool Has(int64_t clock) const { return started_ && clock_ == clock; }
  // Waits for the pull Start(clock) began. On success its weights are
  // swapped into *weights (same shapes; their old buffers become the next
  // pull's) and *clocks gets what they hold (ParamClient::Pull), else
  // *weights is untouched and the pull's error returned. REQUIRES:
  // Has(clock), with the same client.
  absl::Status Take(ParamClient* client, int64_t clock, ParamBuffers* weights,
                    PulledClocks* clocks);
  // Waits for a pull in flight through `client` and forgets it.
  void Drop(ParamClient* client);
  // Forgets a pull whose client is gone (its end waited for the pull).
  void Forget() { started_ = false; }

 private:
  kernels::Backend* const backend_;
  ParamBuffers buffers_;
  PulledClocks clocks_;
  bool started_ = false;
  int64_t clock_ = -1;
  ParamTicket ticket_ = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_WEIGHT_PREFETCH_H_
