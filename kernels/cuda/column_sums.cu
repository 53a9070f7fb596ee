// The column-sum kernels (see column_sums.cuh).
#include <cstdint>

#include "kernels/cuda/column_sums.cuh"

namespace pstrain {
namespace kernels {
namespace {

// The summed term of a bias gradient: dy.
struct BiasTerms {
  static constexpr int kCount = 1;
  const float* dy;
  __device__ void operator()(int64_t r, int j, int cols, float* v) const {
    v[0] = dy[r * cols + j];
  }
};

// The summed terms of LayerNorm's dgamma and dbeta: dy * xhat and dy.
struct LayerNormTerms {
  static constexpr int kCount = 2;
  const float *x, *mean, *rstd, *dy;
  __device__ void operator()(int64_t r, int j, int cols, float* v) const {
    const int64_t i = r * cols + j;
    v[0] = dy[i] * (x[i] - mean[r]) * rstd[r];
    v[1] = dy[i];
  }
};

// partials[k][chunk][j]: term k summed over the chunk's rows of column j.
template <typename Terms>
__device__ void ColumnPartials(int rows, int cols, Terms terms, float* partials) {
  __shared__ float lanes[Terms::kCount][kRowLanes][kColTile + 1];
  const int j = blockIdx.x * kColTile + threadIdx.x;
  const int first = blockIdx.y * kRowsPerChunk;
  const int end = min(rows, first + kRowsPerChunk);
  float sum[Terms::kCount] = {};
  if (j < cols) {
    for (int r = first + threadIdx.y; r < end; r += kRowLanes) {
      float v[Terms::kCount];
      terms(r, j, cols, v);
      for (int k = 0; k < Terms::kCount; ++k) sum[k] += v[k];
    }
  }
  for (int k = 0; k < Terms::kCount; ++k) lanes[k][threadIdx.y][threadIdx.x] = sum[k];
  __syncthreads();
  if (threadIdx.y != 0 || j >= cols) return;
  for (int k = 0; k < Terms::kCount; ++k) {
    float total = 0.0f;
    for (int y = 0; y < kRowLanes; ++y) total += lanes[k][y][threadIdx.x];
    partials[(static_cast<int64_t>(k) * gridDim.y + blockIdx.y) * cols + j] = total;
  }
}

}  // namespace

__global__ void BiasPartialsKernel(int rows, int cols, const float* dy, float* partials) {
  ColumnPartials(rows, cols, BiasTerms{dy}, partials);
}

__global__ void LayerNormPartialsKernel(int rows, int cols, const float* x, const float* mean,
                                        const float* rstd, const float* dy, float* partials) {
  ColumnPartials(rows, cols, LayerNormTerms{x, mean, rstd, dy}, partials);
}

__global__ void SumPartialsKernel(int chunks, int cols, int count, const float* partials,
                                  float* out0, float* out1) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  for (int k = 0; k < count; ++k) {
    float total = 0.0f;
    for (int c = 0; c < chunks; ++c)
      total += partials[(static_cast<int64_t>(k) * chunks + c) * cols + j];
    (k == 0 ? out0 : out1)[j] = total;
  }
}

}  // namespace kernels
}  // namespace pstrain
