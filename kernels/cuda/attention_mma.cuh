// Attention in 16-bit precision on the tensor cores (see attention.cuh for
// the contract): the same flash-attention shape as the fp32 kernels, but a
// block's four warps each take 16 rows and multiply 16 x 16 x 16 tiles of
// bf16 or fp16 with fp32 accumulation (nvcuda::wmma); the softmax, its
// running statistics and the output's accumulator stay fp32 in shared
// memory. nvcc only; sm_80 and later.
#ifndef PSTRAIN_KERNELS_CUDA_ATTENTION_MMA_CUH_
#define PSTRAIN_KERNELS_CUDA_ATTENTION_MMA_CUH_

#include <cuda_runtime.h>

#include "kernels/cuda/attention.cuh"

namespace pstrain {
namespace kernels {

// The forward, and the backward given delta (dout . out per query, dout
// rounded); a.round is 1 (bf16) or 2 (fp16).
cudaError_t LaunchAttentionMma(const AttentionArgs& a, const float* qkv, float* lse, float* out,
                               cudaStream_t stream);
cudaError_t LaunchAttentionBackwardMma(const AttentionArgs& a, const float* qkv, const float* lse,
                                       const float* dout, const float* delta, float* dqkv,
                                       cudaStream_t stream);

}  // namespace kernels
}  // namespace pstrain

#endif  // PSTRAIN_KERNELS_CUDA_ATTENTION_MMA_CUH_
