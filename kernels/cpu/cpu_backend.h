// The CPU backend: matrix products on OpenBLAS's cblas_sgemm, the rest as
// plain loops the compiler vectorises.
#ifndef PSTRAIN_KERNELS_CPU_CPU_BACKEND_H_
#define PSTRAIN_KERNELS_CPU_CPU_BACKEND_H_

#include <memory>

#include "kernels/backend.h"

namespace pstrain {
namespace kernels {

// `threads` caps OpenBLAS's threads (process-wide); 0 keeps its default.
std::unique_ptr<Backend> MakeCpuBackend(int threads);

// The same backend as the reference other devices' ops are tested against:
// it also takes Precision::kFp16, rounding products' inputs to fp16 as it
// rounds them to bf16 (a worker's CPU backend refuses fp16: it would only be
// slower than fp32).
std::unique_ptr<Backend> MakeCpuReferenceBackend();

}  // namespace kernels
}  // namespace pstrain

#endif  // PSTRAIN_KERNELS_CPU_CPU_BACKEND_H_
