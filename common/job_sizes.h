// What a job spec makes every worker hold in host memory whatever its flags
// (its data set and its share of the batch), in 64-bit arithmetic that
// saturates instead of overflowing, and the limits ValidateJobSpec holds a
// spec to: a typo such as `batch_size: 2000000000` is refused up front,
// naming the field, instead of failing an allocation in every worker.
#ifndef PSTRAIN_COMMON_JOB_SIZES_H_
#define PSTRAIN_COMMON_JOB_SIZES_H_

#include <cstdint>

#include "absl/status/status.h"
#include "proto/job.pb.h"

namespace pstrain {

// Host bytes one worker may need for its data set and batch buffers: more
// than any built-in model or test needs, far less than a typo asks for.
// (The model's activations come on top; a GPT's shrink under
// --device_memory_budget, and what cannot be allocated fails the worker
// with "out of memory", exit 1.)
inline constexpr int64_t kMaxWorkerHostBytes = int64_t{64} << 30;
// Elements of one tensor of a worker's batch: the kernels count in int.
inline constexpr int64_t kMaxBatchElements = (int64_t{1} << 31) - 1;

// a * b and a + b for a, b >= 0, INT64_MAX where the exact value is larger.
int64_t SaturatingMul(int64_t a, int64_t b);
int64_t SaturatingAdd(int64_t a, int64_t b);

struct WorkerFootprint {
  int64_t data_bytes = 0;      // the data set in memory (a TEXT corpus: not known here)
  int64_t rows = 0;            // the largest share of a clock's batch a worker gets
  int64_t row_elements = 0;    // the widest tensor's elements per row of that share
  int64_t batch_bytes = 0;     // the share's host batch buffers
};

// The footprint of a completed spec whose model already checked out.
WorkerFootprint FootprintOf(const JobSpec& job);

// INVALID_ARGUMENT naming the field when a worker's footprint passes
// kMaxWorkerHostBytes or a batch tensor kMaxBatchElements.
absl::Status ValidateJobSizes(const JobSpec& job);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_JOB_SIZES_H_
