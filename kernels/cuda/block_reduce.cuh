// Sums and maxima over the threads of one block (blockDim.x a power of two,
// at most kThreads), through `shared` (kThreads floats of shared memory).
// Every thread of the block calls them and gets the result. nvcc only.
#ifndef PSTRAIN_KERNELS_CUDA_BLOCK_REDUCE_CUH_
#define PSTRAIN_KERNELS_CUDA_BLOCK_REDUCE_CUH_

#include "kernels/cuda/launch.cuh"

namespace pstrain {
namespace kernels {

__device__ inline float BlockSum(float v, float* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  const float total = shared[0];
  __syncthreads();  // before `shared` is used again
  return total;
}

__device__ inline float BlockMax(float v, float* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) shared[threadIdx.x] = fmaxf(shared[threadIdx.x], shared[threadIdx.x + s]);
    __syncthreads();
  }
  const float m = shared[0];
  __syncthreads();
  return m;
}

}  // namespace kernels
}  // namespace pstrain

#endif  // PSTRAIN_KERNELS_CUDA_BLOCK_REDUCE_CUH_
