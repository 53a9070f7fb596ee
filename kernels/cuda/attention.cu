// The attention kernels (see attention.cuh).
#include "kernels/cuda/attention.cuh"

#include <cmath>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/launch.cuh"

namespace pstrain {
namespace kernels {
namespace {

// v rounded to nearest even into out16[i] (bf16 or fp16), when out16 is set.
__device__ void Store16(float v, void* out16, bool bf16, int64_t i) {
  if (out16 == nullptr) return;
  if (bf16) {
    static_cast<__nv_bfloat16*>(out16)[i] = __float2bfloat16_rn(v);
  } else {
    static_cast<__half*>(out16)[i] = __float2half_rn(v);
  }
}

template <typename T>
__device__ T FromFloat(float v);
template <>
__device__ float FromFloat<float>(float v) { return v; }
template <>
__device__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __half FromFloat<__half>(float v) { return __float2half_rn(v); }

template <typename Out>
__device__ void SplitHeads(const HeadLayout& l, const float* in, Out* out) {
  PSTRAIN_GRID_STRIDE(i, l.n) { out[l.Split(i)] = FromFloat<Out>(in[i]); }
}

}  // namespace

__global__ void CausalSoftmaxKernel(int seq, float* a, void* out16, bool bf16) {
  __shared__ float shared[kThreads];
  const int64_t row = blockIdx.x;
  const int t = static_cast<int>(row % seq);
  float* r = a + row * seq;
  float m = -INFINITY;
  for (int j = threadIdx.x; j <= t; j += blockDim.x) m = fmaxf(m, r[j]);
  m = BlockMax(m, shared);
  float s = 0.0f;
  for (int j = threadIdx.x; j <= t; j += blockDim.x) s += expf(r[j] - m);
  const float sum = BlockSum(s, shared);
  for (int j = threadIdx.x; j < seq; j += blockDim.x) {
    const float v = j <= t ? expf(r[j] - m) / sum : 0.0f;
    r[j] = v;
    Store16(v, out16, bf16, row * seq + j);
  }
}

__global__ void CausalSoftmaxBackwardKernel(int seq, const float* a, float* d, void* out16,
                                            bool bf16) {
  __shared__ float shared[kThreads];
  const int64_t row = blockIdx.x;
  const int t = static_cast<int>(row % seq);
  const float* ar = a + row * seq;
  float* dr = d + row * seq;
  float s = 0.0f;
  for (int j = threadIdx.x; j <= t; j += blockDim.x) s += ar[j] * dr[j];
  const float dot = BlockSum(s, shared);
  for (int j = threadIdx.x; j < seq; j += blockDim.x) {
    const float v = j <= t ? ar[j] * (dr[j] - dot) : 0.0f;
    dr[j] = v;
    Store16(v, out16, bf16, row * seq + j);
  }
}

__global__ void SplitHeadsKernel(HeadLayout l, const float* in, float* out) {
  SplitHeads(l, in, out);
}

__global__ void SplitHeadsBf16Kernel(HeadLayout l, const float* in, __nv_bfloat16* out) {
  SplitHeads(l, in, out);
}

__global__ void SplitHeadsHalfKernel(HeadLayout l, const float* in, __half* out) {
  SplitHeads(l, in, out);
}

__global__ void MergeHeadsKernel(HeadLayout l, const float* in, float* out) {
  PSTRAIN_GRID_STRIDE(i, l.n) { out[i] = in[l.Split(i)]; }
}

}  // namespace kernels
}  // namespace pstrain
