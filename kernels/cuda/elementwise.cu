// The elementwise kernels (see elementwise.cuh).
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/launch.cuh"

namespace pstrain {
namespace kernels {

__global__ void AddBiasKernel(int64_t n, int cols, const float* bias, float* y) {
  PSTRAIN_GRID_STRIDE(i, n) { y[i] += bias[i % cols]; }
}

__global__ void ReluForwardKernel(int64_t n, const float* x, float* y) {
  PSTRAIN_GRID_STRIDE(i, n) { y[i] = x[i] > 0.0f ? x[i] : 0.0f; }
}

__global__ void ReluBackwardKernel(int64_t n, const float* y, const float* dy, float* dx) {
  PSTRAIN_GRID_STRIDE(i, n) { dx[i] = y[i] > 0.0f ? dy[i] : 0.0f; }
}

__device__ const float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)

__global__ void GeluKernel(int64_t n, const float* x, float* y) {
  PSTRAIN_GRID_STRIDE(i, n) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + tanhf(kGeluC * (v + 0.044715f * v * v * v)));
  }
}

__global__ void GeluBackwardKernel(int64_t n, const float* x, const float* dy, float* dx) {
  PSTRAIN_GRID_STRIDE(i, n) {
    const float v = x[i];
    const float t = tanhf(kGeluC * (v + 0.044715f * v * v * v));
    dx[i] = dy[i] * (0.5f * (1.0f + t) +
                     0.5f * v * (1.0f - t * t) * kGeluC * (1.0f + 3.0f * 0.044715f * v * v));
  }
}

__global__ void ScaleKernel(int64_t n, float alpha, float* x) {
  PSTRAIN_GRID_STRIDE(i, n) { x[i] *= alpha; }
}

__global__ void AxpyKernel(int64_t n, float alpha, const float* x, float* y) {
  PSTRAIN_GRID_STRIDE(i, n) { y[i] += alpha * x[i]; }
}

__global__ void ToBf16Kernel(int64_t n, const float* x, __nv_bfloat16* y) {
  PSTRAIN_GRID_STRIDE(i, n) { y[i] = __float2bfloat16_rn(x[i]); }
}

__global__ void ToHalfKernel(int64_t n, const float* x, __half* y) {
  PSTRAIN_GRID_STRIDE(i, n) { y[i] = __float2half_rn(x[i]); }
}

__global__ void FromBf16Kernel(int64_t n, const __nv_bfloat16* x, float* y) {
  PSTRAIN_GRID_STRIDE(i, n) { y[i] = __bfloat162float(x[i]); }
}

__global__ void FromHalfKernel(int64_t n, const __half* x, float* y) {
  PSTRAIN_GRID_STRIDE(i, n) { y[i] = __half2float(x[i]); }
}

__global__ void EmbeddingKernel(int64_t n, int dim, const int32_t* ids, const float* table,
                                float* out, bool accumulate) {
  PSTRAIN_GRID_STRIDE(i, n) {
    const float v = table[static_cast<int64_t>(ids[i / dim]) * dim + i % dim];
    out[i] = accumulate ? out[i] + v : v;
  }
}

__global__ void EmbeddingBackwardKernel(int64_t n, int dim, const int32_t* ids, const float* dout,
                                        float* dtable) {
  PSTRAIN_GRID_STRIDE(i, n) {
    atomicAdd(&dtable[static_cast<int64_t>(ids[i / dim]) * dim + i % dim], dout[i]);
  }
}

}  // namespace kernels
}  // namespace pstrain
