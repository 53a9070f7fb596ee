// The CUDA backend: matrix products on cuBLAS, the other ops as CUDA kernels,
// all on one stream of one device. Compiled by nvcc when the build found a
// CUDA toolkit (third_party/cuda); otherwise MakeCudaBackend says so. This
// header needs no CUDA headers.
#ifndef PSTRAIN_KERNELS_CUDA_CUDA_BACKEND_H_
#define PSTRAIN_KERNELS_CUDA_CUDA_BACKEND_H_

#include <memory>
#include <string>

#include "kernels/backend.h"

namespace pstrain {
namespace kernels {

// Whether this build holds the CUDA backend.
bool CudaBackendBuilt();

// A backend on CUDA device `device`, or null with *error saying why (built
// without CUDA, no driver, no such device).
std::unique_ptr<Backend> MakeCudaBackend(int device, std::string* error);

}  // namespace kernels
}  // namespace pstrain

#endif  // PSTRAIN_KERNELS_CUDA_CUDA_BACKEND_H_
