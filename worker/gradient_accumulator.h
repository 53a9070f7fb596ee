// A clock's gradient summed over micro-batches (job.micro_batches > 1, a
// device memory plan's split) or written by a pipeline stage: one buffer
// per parameter holding the batch's mean gradient, which the push reads.
#ifndef PSTRAIN_WORKER_GRADIENT_ACCUMULATOR_H_
#define PSTRAIN_WORKER_GRADIENT_ACCUMULATOR_H_

#include <vector>

#include "absl/status/statusor.h"
#include "common/params.h"
#include "worker/models/model.h"
#include "worker/param_client.h"

namespace pstrain {

// Not thread-safe. The sum's buffers are reused from clock to clock: a push
// that reads them must be awaited before the next clock starts one.
class GradientAccumulator {
 public:
  // Zeroes the sum, one buffer per parameter of `params`.
  void Reset(const std::vector<ParamInfo>& params);
  // Adds `grads` (one micro-batch's mean gradient, parameter by parameter)
  // weighted by `share` (its share of the batch's rows).
  void Add(const ParamBuffers& grads, float share);
  // Trains `batch` as `k` micro-batches (EvenSlice of its rows) through
  // `model`: the sum becomes the batch's mean gradient, each micro-batch's
  // weighted by its rows; returns the batch's mean loss and its counts.
  absl::StatusOr<StepResult> Train(Model& model, const Batch& batch, int k);

  ParamBuffers& sum() { return sum_; }

 private:
  ParamBuffers sum_;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_GRADIENT_ACCUMULATOR_H_
