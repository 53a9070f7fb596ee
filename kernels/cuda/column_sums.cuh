// Column sums of a [rows, cols] matrix (the bias gradient, LayerNorm's
// dgamma and dbeta) in two passes: blocks of kColTile columns x
// kRowsPerChunk rows write partial sums, one per chunk of rows, and a second
// kernel adds each column's partials in order. A thread per column summing
// all the rows alone would leave most of the GPU idle (a few blocks for 768
// columns). nvcc only.
#ifndef PSTRAIN_KERNELS_CUDA_COLUMN_SUMS_CUH_
#define PSTRAIN_KERNELS_CUDA_COLUMN_SUMS_CUH_

#include <cuda_runtime.h>

#include "kernels/cuda/launch.cuh"

namespace pstrain {
namespace kernels {

constexpr int kColTile = 32, kRowLanes = kThreads / kColTile, kRowsPerChunk = 256;

// Chunks of rows: the partials per column and summed term.
inline int RowChunks(int rows) { return (rows + kRowsPerChunk - 1) / kRowsPerChunk; }
// The first pass's grid over `chunks` chunks of rows, and its blocks.
inline dim3 PartialsGrid(int cols, int chunks) {
  return dim3((cols + kColTile - 1) / kColTile, chunks);
}
inline dim3 PartialsBlock() { return dim3(kColTile, kRowLanes); }

// First pass, partials[chunk][j]: dy[r, j] summed over the chunk's rows r.
__global__ void BiasPartialsKernel(int rows, int cols, const float* dy, float* partials);
// First pass, partials[k][chunk][j] for the two terms of LayerNorm's
// dgamma (k = 0: dy * xhat, xhat = (x - mean) * rstd) and dbeta (k = 1: dy).
__global__ void LayerNormPartialsKernel(int rows, int cols, const float* x, const float* mean,
                                        const float* rstd, const float* dy, float* partials);
// Second pass, one thread per column (ceil(cols / kThreads) blocks):
// out_k[j] = sum over chunks of partials[k][chunk][j], for k < count
// (out1 unused when count is 1).
__global__ void SumPartialsKernel(int chunks, int cols, int count, const float* partials,
                                  float* out0, float* out1);

}  // namespace kernels
}  // namespace pstrain

#endif  // PSTRAIN_KERNELS_CUDA_COLUMN_SUMS_CUH_
