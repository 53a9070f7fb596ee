#include "worker/device.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"

namespace pstrain {

absl::StatusOr<std::unique_ptr<kernels::Backend>> OpenDevice(const std::string& device,
                                                             int compute_threads,
                                                             std::string* note) {
  if (device == "cpu") {
    *note = "cpu";
    return kernels::MakeCpuBackend(compute_threads);
  }
  if (device == "auto") {
    std::string why;
    std::unique_ptr<kernels::Backend> gpu = kernels::MakeCudaBackend(0, &why);
    if (gpu != nullptr) {
      *note = "cuda:0 (auto)";
      return gpu;
    }
    *note = absl::StrCat("cpu (auto: ", why, ")");
    return kernels::MakeCpuBackend(compute_threads);
  }
  int index = 0;
  if (device == "cuda" || (absl::StartsWith(device, "cuda:") &&
                           absl::SimpleAtoi(device.substr(5), &index) && index >= 0)) {
    std::string why;
    std::unique_ptr<kernels::Backend> gpu = kernels::MakeCudaBackend(index, &why);
    if (gpu == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("--device=", device, ": ", why));
    }
    *note = absl::StrCat("cuda:", index);
    return gpu;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--device=", device, ": expected auto, cpu, cuda or cuda:N"));
}

}  // namespace pstrain
