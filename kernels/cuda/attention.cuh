// The CUDA backend's attention kernels besides cuBLAS's batched products:
// the causal softmax over the scores and its backward, one block of
// kThreads per row, and the moves of q, k and v between the tokens' rows
// and each (sequence, head) pair's matrices. The op's contract is
// Backend::Attention's (kernels/backend.h). nvcc only.
#ifndef PSTRAIN_KERNELS_CUDA_ATTENTION_CUH_
#define PSTRAIN_KERNELS_CUDA_ATTENTION_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace pstrain {
namespace kernels {

// Attention works on each (sequence, head) pair's [seq, head_dim] matrices
// one batched product at a time, so it moves them side by side first:
// rows of `parts` x heads x head_dim columns (q|k|v, or one part) become
// [parts][batch][heads][seq][head_dim], and back.
struct HeadLayout {
  int seq, heads, head_dim, parts;
  int64_t n;  // elements: batch * seq * parts * heads * head_dim
  // The index in [parts][batch][heads][seq][head_dim] of row-layout index i.
  __device__ int64_t Split(int64_t i) const {
    const int c = heads * head_dim, width = parts * c;
    const int64_t row = i / width;
    const int col = static_cast<int>(i % width);
    const int p = col / c, h = (col % c) / head_dim, d = col % head_dim;
    const int64_t batch = n / (static_cast<int64_t>(seq) * width);
    const int64_t b = row / seq, t = row % seq;
    return (((p * batch + b) * heads + h) * seq + t) * head_dim + d;
  }
};

// One block per row of scores a [*, seq]: row t (of its sequence) keeps
// columns <= t, softmaxed; the rest become 0. With out16 (bf16 when `bf16`,
// else fp16), a 16-bit copy too.
__global__ void CausalSoftmaxKernel(int seq, float* a, void* out16, bool bf16);
// Through the causal softmax: d = a * (d - sum_j a d) for columns <= t,
// else 0. With out16, a 16-bit copy too.
__global__ void CausalSoftmaxBackwardKernel(int seq, const float* a, float* d, void* out16,
                                            bool bf16);
// in (row layout) into out in the heads' layout `l`, as fp32, or rounded to
// nearest even into bf16 or fp16; l.n elements (grid-stride).
__global__ void SplitHeadsKernel(HeadLayout l, const float* in, float* out);
__global__ void SplitHeadsBf16Kernel(HeadLayout l, const float* in, __nv_bfloat16* out);
__global__ void SplitHeadsHalfKernel(HeadLayout l, const float* in, __half* out);
// in (the heads' layout `l`) back into out (row layout); l.n elements.
__global__ void MergeHeadsKernel(HeadLayout l, const float* in, float* out);

}  // namespace kernels
}  // namespace pstrain

#endif  // PSTRAIN_KERNELS_CUDA_ATTENTION_CUH_
