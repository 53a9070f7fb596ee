// `psctl export`: the weights of a complete checkpoint set as one
// safetensors file, each parameter whole and named as in the model
// ("dense0/weight"), F32 in its shape; "__metadata__" holds the clock and
// the job's name. Readable by any safetensors reader (Python's
// safetensors, PyTorch, JAX).
#ifndef PSTRAIN_TOOLS_EXPORT_H_
#define PSTRAIN_TOOLS_EXPORT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"

namespace pstrain {

// Exports the set that `dir`/manifest.json names for `job` (complete: its
// spec, overrides and defaults applied) to `out` (written through a
// temporary file and renamed); the set's clock. NOT_FOUND without a
// manifest; INVALID_ARGUMENT when the files do not match the job.
absl::StatusOr<int64_t> ExportCheckpoint(const std::string& dir, const JobSpec& job,
                                         const std::string& out);

}  // namespace pstrain

#endif  // PSTRAIN_TOOLS_EXPORT_H_
