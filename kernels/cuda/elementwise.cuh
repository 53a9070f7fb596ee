// The CUDA backend's elementwise kernels: bias, activations, scaling,
// rounding to 16 bits and widening back, and the embedding's gather and
// scatter-add. Each runs a grid-stride loop over its n elements (launch
// with Blocks(n) blocks of kThreads). The ops' contracts are Backend's
// (kernels/backend.h). nvcc only.
#ifndef PSTRAIN_KERNELS_CUDA_ELEMENTWISE_CUH_
#define PSTRAIN_KERNELS_CUDA_ELEMENTWISE_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace pstrain {
namespace kernels {

// y[i] += bias[i % cols] (n = rows * cols).
__global__ void AddBiasKernel(int64_t n, int cols, const float* bias, float* y);
__global__ void ReluForwardKernel(int64_t n, const float* x, float* y);
__global__ void ReluBackwardKernel(int64_t n, const float* y, const float* dy, float* dx);
__global__ void GeluKernel(int64_t n, const float* x, float* y);
__global__ void GeluBackwardKernel(int64_t n, const float* x, const float* dy, float* dx);
__global__ void ScaleKernel(int64_t n, float alpha, float* x);
__global__ void AxpyKernel(int64_t n, float alpha, const float* x, float* y);
// x rounded to nearest even into 16 bits.
__global__ void ToBf16Kernel(int64_t n, const float* x, __nv_bfloat16* y);
__global__ void ToHalfKernel(int64_t n, const float* x, __half* y);
// x widened to fp32 (exactly).
__global__ void FromBf16Kernel(int64_t n, const __nv_bfloat16* x, float* y);
__global__ void FromHalfKernel(int64_t n, const __half* x, float* y);
// out[i] (=, or += when accumulate) table[ids[i / dim], i % dim] (n = rows * dim).
__global__ void EmbeddingKernel(int64_t n, int dim, const int32_t* ids, const float* table,
                                float* out, bool accumulate);
// dtable[ids[i / dim], i % dim] += dout[i], atomically (rows may share an id).
__global__ void EmbeddingBackwardKernel(int64_t n, int dim, const int32_t* ids, const float* dout,
                                        float* dtable);

}  // namespace kernels
}  // namespace pstrain

#endif  // PSTRAIN_KERNELS_CUDA_ELEMENTWISE_CUH_
