// Picks the kernels backend a worker computes on (--device).
#ifndef PSTRAIN_WORKER_DEVICE_H_
#define PSTRAIN_WORKER_DEVICE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace pstrain {

// `device`: "cpu"; "cuda" or "cuda:N" (device N, default 0); "auto": CUDA
// device 0 when there is one, else the CPU. `compute_threads` caps the CPU
// backend's BLAS threads (0: its default). *note says what was chosen and,
// for auto, why. INVALID_ARGUMENT for an unknown device, FAILED_PRECONDITION
// (with the reason) for a CUDA device that cannot be used.
absl::StatusOr<std::unique_ptr<kernels::Backend>> OpenDevice(const std::string& device,
                                                             int compute_threads,
                                                             std::string* note);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_DEVICE_H_
