// The model half of ValidateJobSpec: the model against its data (an MLP's
// widths, a GPT's sizes and TEXT data, an EXTERNAL model's declared
// parameters and own data) and its cut into chunks. Pure functions;
// thread-safe.
#ifndef PSTRAIN_COMMON_JOB_VALIDATE_MODEL_H_
#define PSTRAIN_COMMON_JOB_VALIDATE_MODEL_H_

#include <cstdint>

#include "absl/status/status.h"
#include "proto/job.pb.h"

namespace pstrain {

// The most chunks a spec may cut its model into: every chunk is a server's
// unit of storage, locking and transfer.
inline constexpr int64_t kMaxChunks = int64_t{1} << 20;

// Checks a completed spec's model and data: INVALID_ARGUMENT "job spec:
// ..." naming the first problem, e.g. "model.input_dim is 10 but the data
// has 784 features", or a chunk_bytes that makes more than kMaxChunks.
absl::Status ValidateModel(const JobSpec& job);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_JOB_VALIDATE_MODEL_H_
