// The training data and the evaluation, as the clock loop
// (worker/clock_loop.h) sees them: the trainer's data sets
// (worker/trainer.h), or a test's fixed batches.
#ifndef PSTRAIN_WORKER_DATA_SOURCE_H_
#define PSTRAIN_WORKER_DATA_SOURCE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "worker/models/model.h"

namespace pstrain {

// Called from the loop's thread only.
class DataSource {
 public:
  virtual ~DataSource() = default;
  // Share `share_index` of `num_shares` of clock `clock`'s global batch.
  virtual void NextBatch(int64_t clock, int num_shares, int share_index, Batch* batch) = 0;
  // The accuracy of the model's current weights on the test (or
  // validation) data.
  virtual absl::StatusOr<double> Evaluate(Model& model) = 0;
  // The pass over the data that clock `clock` is in.
  virtual int64_t Epoch(int64_t clock) const = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_DATA_SOURCE_H_
