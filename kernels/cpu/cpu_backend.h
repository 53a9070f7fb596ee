// The CPU backend: matrix products on OpenBLAS's cblas_sgemm, the rest as
// plain loops the compiler vectorises.
#ifndef PSTRAIN_KERNELS_CPU_CPU_BACKEND_H_
#define PSTRAIN_KERNELS_CPU_CPU_BACKEND_H_

#include <memory>

#include "kernels/backend.h"

namespace pstrain {
namespace kernels {

// `threads` > 1: the backend splits its work (matrix products included) over
// that many threads, the caller's and threads - 1 of its own, OpenBLAS
// being held to one (process-wide); 1: all on the caller's thread; 0: the
// caller's thread, with OpenBLAS's default of one thread a core for the
// products.
std::unique_ptr<Backend> MakeCpuBackend(int threads);

// The same backend as the reference other devices' ops are tested against:
// it also takes Precision::kFp16, rounding products' inputs to fp16 as it
// rounds them to bf16 (a worker's CPU backend refuses fp16: it would only be
// slower than fp32).
std::unique_ptr<Backend> MakeCpuReferenceBackend();

}  // namespace kernels
}  // namespace pstrain

#endif  // PSTRAIN_KERNELS_CPU_CPU_BACKEND_H_
