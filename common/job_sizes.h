// The sizes a job spec implies, known without reading its data: its
// training set and its length in clocks; what it makes every worker hold in
// host memory whatever its flags (its data set and its share of the
// batch), in 64-bit arithmetic that saturates instead of overflowing; and
// the limits ValidateJobSpec holds a spec to: a typo such as
// `batch_size: 2000000000` is refused up front, naming the field, instead
// of failing an allocation in every worker. Pure functions; thread-safe.
#ifndef PSTRAIN_COMMON_JOB_SIZES_H_
#define PSTRAIN_COMMON_JOB_SIZES_H_

#include <cstdint>

#include "absl/status/status.h"
#include "proto/job.pb.h"

namespace pstrain {

// Fashion-MNIST (data.dataset FASHION_MNIST): 60000 training and 10000 test
// examples of 784 features.
inline constexpr int64_t kFashionMnistTrain = 60000;
inline constexpr int64_t kFashionMnistExamples = 70000;  // training and test
inline constexpr int kFashionMnistDim = 784;

// Size of the training set the spec names (60000 for Fashion-MNIST), known
// without reading it.
int64_t TrainSetSize(const JobSpec& job);
// Clocks per epoch (the last partial batch of an epoch is dropped).
int64_t ClocksPerEpoch(const JobSpec& job);
// Total clocks of the job: `clocks` if set, else epochs * ClocksPerEpoch.
int64_t TotalClocks(const JobSpec& job);

// Host bytes one worker may need for its data set and batch buffers: more
// than any built-in model or test needs, far less than a typo asks for.
// (The model's activations come on top; a GPT's shrink under
// --device_memory_budget, and what cannot be allocated fails the worker
// with "out of memory", exit 1.)
inline constexpr int64_t kMaxWorkerHostBytes = int64_t{64} << 30;
// Elements of one tensor of a worker's batch: the kernels count in int.
inline constexpr int64_t kMaxBatchElements = (int64_t{1} << 31) - 1;

// Sparse tables (JobSpec.tables). Every server holds a part of each: its
// lock, its status and, with admission, its filter, whatever ids come.
inline constexpr int kMaxTables = 256;
// A table's admission counts (TableSpec.admit_after >= 2): one-byte
// counters on every server, inside the table's memory_budget_bytes.
inline constexpr int64_t kAdmissionFilterBytes = int64_t{4} << 20;
// What a row in memory costs beside its floats (its id in the index, its
// cell's id and mark), inside the budget too. A row on disk keeps its id
// in the index (about 32 bytes), outside it.
inline constexpr int64_t kRowBookkeepingBytes = 48;
// The most floats of optimizer state a row keeps per weight (Adam's two).
inline constexpr int kMaxRowStateFloatsPerWeight = 2;
// The largest budget a table may declare per server: a guard against
// typos, far above any machine's memory.
inline constexpr int64_t kMaxTableBudgetBytes = int64_t{1} << 40;
// Ids are PyTorch's int64 >= 0: num_ids is at most 2^63 (0: any id).
inline constexpr uint64_t kMaxNumIds = uint64_t{1} << 63;

// Bytes `table` holds on every server before any row: its admission filter.
int64_t TableFixedBytes(const TableSpec& table);

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
// kMaxWorkerHostBytes or a batch tensor kMaxBatchElements, or the tables
// pass their limits: more than kMaxTables, a num_ids beyond kMaxNumIds, a
// memory_budget_bytes beyond kMaxTableBudgetBytes or too small for the
// table's fixed bytes and one row (with the most state any row optimizer
// keeps).
absl::Status ValidateJobSizes(const JobSpec& job);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_JOB_SIZES_H_
