// The CUDA backend: matrix products on cuBLAS, the other ops as CUDA kernels,
// all on one stream of one device. Compiled by nvcc when the build found a
// CUDA toolkit (third_party/cuda); otherwise MakeCudaBackend says so. This
// header needs no CUDA headers. Inside: cuda_backend.cu dispatches the ops
// over device.cuh (memory, streams, fences, the sticky error), cuBLAS and
// the kernels by family (elementwise, column_sums, layernorm, softmax_xent,
// attention .cuh), each queued through one launch helper (launch.cuh).
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
