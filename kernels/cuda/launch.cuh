// How the CUDA backend's kernels are launched: kThreads threads a block, and
// for elementwise work a grid of at most 65536 blocks over which each
// kernel's loop strides (grid-stride loops). LaunchKernel is the one place
// a kernel is queued; CudaDevice::Launch (kernels/cuda/device.cuh) adds the
// backend's sticky error around it. nvcc only.
#ifndef PSTRAIN_KERNELS_CUDA_LAUNCH_CUH_
#define PSTRAIN_KERNELS_CUDA_LAUNCH_CUH_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace pstrain {
namespace kernels {

constexpr int kThreads = 256;

// Blocks of kThreads for n elements, at most 65536 (the loops stride).
inline int Blocks(int64_t n) {
  return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 1 << 16));
}

// A grid-stride loop: for (i = this thread's first; i < n; i += the grid's
// threads), i an int64_t.
#define PSTRAIN_GRID_STRIDE(i, n)                                                        \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

// Queues kernel<<<grid, block, shared, stream>>>(args...) and returns the
// launch's error: cudaSuccess once it is queued (a fault while it runs
// shows in a later call). Each argument converts to the kernel's parameter.
template <typename... Params, typename... Args>
cudaError_t LaunchKernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared,
                         cudaStream_t stream, Args... args) {
  kernel<<<grid, block, shared, stream>>>(static_cast<Params>(args)...);
  return cudaGetLastError();
}

// The same without dynamic shared memory.
template <typename... Params, typename... Args>
cudaError_t LaunchKernel(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream,
                         Args... args) {
  return LaunchKernel(kernel, grid, block, size_t{0}, stream, args...);
}

}  // namespace kernels
}  // namespace pstrain

#endif  // PSTRAIN_KERNELS_CUDA_LAUNCH_CUH_
