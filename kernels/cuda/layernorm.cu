// The LayerNorm kernels (see layernorm.cuh).
#include <cstdint>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/layernorm.cuh"

namespace pstrain {
namespace kernels {

__global__ void LayerNormKernel(int dim, const float* x, const float* gamma, const float* beta,
                                float* y, float* mean, float* rstd) {
  __shared__ float shared[kThreads];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * dim;
  float* yr = y + r * dim;
  float s = 0.0f;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) s += xr[j];
  const float m = BlockSum(s, shared) / dim;
  float v = 0.0f;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) v += (xr[j] - m) * (xr[j] - m);
  const float inv = rsqrtf(BlockSum(v, shared) / dim + 1e-5f);
  for (int j = threadIdx.x; j < dim; j += blockDim.x)
    yr[j] = (xr[j] - m) * inv * gamma[j] + beta[j];
  if (threadIdx.x == 0) {
    mean[r] = m;
    rstd[r] = inv;
  }
}

__global__ void LayerNormBackwardKernel(int dim, const float* x, const float* gamma,
                                        const float* mean, const float* rstd, const float* dy,
                                        float* dx) {
  __shared__ float shared[kThreads];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * dim;
  const float* dyr = dy + r * dim;
  float* dxr = dx + r * dim;
  const float m = mean[r], inv = rstd[r];
  float sg = 0.0f, sgx = 0.0f;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) {
    const float g = dyr[j] * gamma[j];
    sg += g;
    sgx += g * (xr[j] - m) * inv;
  }
  const float mean_g = BlockSum(sg, shared) / dim;
  const float mean_gx = BlockSum(sgx, shared) / dim;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) {
    const float xhat = (xr[j] - m) * inv;
    dxr[j] = inv * (dyr[j] * gamma[j] - mean_g - xhat * mean_gx);
  }
}

}  // namespace kernels
}  // namespace pstrain
