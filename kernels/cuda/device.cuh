// One CUDA device as the backend uses it: its memory (allocations within a
// budget, scratch that grows, host memory pinned for fast copies), its two
// streams (the computation's, and one for uploads from pinned memory that
// run beside it), fences on the computation's stream, and the first error
// met, which is sticky as Backend's contract says (kernels/backend.h):
// after it every call does nothing. Launch queues a kernel. The memory and
// copy calls keep Backend's contracts. Not thread-safe, like a Backend.
// nvcc only.
#ifndef PSTRAIN_KERNELS_CUDA_DEVICE_CUH_
#define PSTRAIN_KERNELS_CUDA_DEVICE_CUH_

#include <cuda_runtime.h>

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kernels/cuda/launch.cuh"

namespace pstrain {
namespace kernels {

class CudaDevice {
 public:
  // Device memory that grows to the largest size asked of it (Grow).
  struct Scratch {
    void* p = nullptr;
    int64_t bytes = 0;
  };

  // Selects CUDA device `device` for the calling thread and makes the
  // streams; a failure is error()'s.
  explicit CudaDevice(int device);
  // Waits for the queued work, then frees what Alloc gave, unpins and
  // destroys the streams.
  ~CudaDevice();
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  int device() const { return device_; }
  // The device's compute capability (8 and 0 for 8.0); false when it could
  // not be read (the error is kept).
  bool ComputeCapability(int* major, int* minor);
  // The computation's stream: every kernel and cuBLAS call is queued on it.
  cudaStream_t stream() const { return stream_; }
  // Whether no error has been met (work may be queued).
  bool ok() const { return error_.empty(); }
  // The first error met, "" while there is none.
  const std::string& error() const { return error_; }
  // True for cudaSuccess; else keeps "<what> on device <d>: <name>
  // (<description>)" as the error unless one is kept, and returns false.
  bool Check(cudaError_t e, const char* what);
  // Keeps `message` as the error unless one is kept already.
  void Fail(const std::string& message);
  // Waits for everything queued on both streams.
  void Synchronize();

  // The launch of every op: unless an error is kept, queues `kernel` on the
  // computation's stream with `grid` blocks of `block` threads; a launch
  // error becomes error(), naming `what`. False when nothing was queued.
  template <typename... Params, typename... Args>
  bool Launch(const char* what, void (*kernel)(Params...), dim3 grid, dim3 block, Args... args) {
    if (!ok()) return false;
    return Check(LaunchKernel(kernel, grid, block, stream_, args...), what);
  }

  // Backend's memory calls (kernels/backend.h).
  void* Alloc(int64_t bytes);
  void Free(void* p);
  int64_t peak_bytes() const { return peak_; }
  void SetMemoryLimit(int64_t bytes) { limit_ = bytes; }
  // `bytes` of `scratch`, or null (error() says why).
  void* Grow(Scratch& scratch, int64_t bytes);
  bool PinHost(void* host, int64_t bytes);
  void UnpinHost(void* host);

  // Backend's copies and fences.
  void Upload(const void* host, int64_t bytes, void* device);
  void Download(const void* device, int64_t bytes, void* host);
  void DownloadAsync(const void* device, int64_t bytes, void* host);
  int64_t Fence();
  void WaitFor(int64_t fence);
  bool Reached(int64_t fence);

 private:
  // Whether [host, host + bytes) lies in memory pinned by PinHost.
  bool Pinned(const void* host, int64_t bytes) const;

  const int device_;
  cudaStream_t stream_ = nullptr;
  cudaStream_t copy_stream_ = nullptr;  // uploads from pinned memory
  cudaEvent_t copied_ = nullptr;        // the last of them
  std::string error_;
  std::unordered_map<void*, size_t> sizes_;  // what Alloc gave: bytes
  int64_t held_ = 0, peak_ = 0, limit_ = 0;
  std::map<const char*, int64_t> pinned_;  // start -> bytes
  std::deque<std::pair<int64_t, cudaEvent_t>> fences_;
  std::vector<cudaEvent_t> spare_events_;
  int64_t last_fence_ = 0;
};

}  // namespace kernels
}  // namespace pstrain

#endif  // PSTRAIN_KERNELS_CUDA_DEVICE_CUH_
