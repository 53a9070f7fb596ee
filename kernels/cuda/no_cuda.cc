// The CUDA backend's stand-in for builds without a CUDA toolkit.
#include "kernels/cuda/cuda_backend.h"

namespace pstrain {
namespace kernels {

bool CudaBackendBuilt() { return false; }

std::unique_ptr<Backend> MakeCudaBackend(int /*device*/, std::string* error) {
  *error = "this build has no CUDA backend (no CUDA toolkit was found at build time; set CUDA_PATH)";
  return nullptr;
}

}  // namespace kernels
}  // namespace pstrain
