// A CUDA device's memory, streams and fences (see device.cuh).
#include <algorithm>

#include "kernels/cuda/device.cuh"

namespace pstrain {
namespace kernels {

CudaDevice::CudaDevice(int device) : device_(device) {
  if (!Check(cudaSetDevice(device), "cudaSetDevice")) return;
  if (!Check(cudaStreamCreate(&stream_), "cudaStreamCreate")) return;
  if (!Check(cudaStreamCreate(&copy_stream_), "cudaStreamCreate")) return;
  Check(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming), "cudaEventCreate");
}

CudaDevice::~CudaDevice() {
  Synchronize();
  for (const auto& [p, bytes] : sizes_) cudaFree(p);
  for (const auto& [host, bytes] : pinned_) cudaHostUnregister(const_cast<char*>(host));
  for (const auto& [id, event] : fences_) cudaEventDestroy(event);
  for (cudaEvent_t event : spare_events_) cudaEventDestroy(event);
  if (copied_ != nullptr) cudaEventDestroy(copied_);
  if (copy_stream_ != nullptr) cudaStreamDestroy(copy_stream_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

bool CudaDevice::ComputeCapability(int* major, int* minor) {
  return Check(cudaDeviceGetAttribute(major, cudaDevAttrComputeCapabilityMajor, device_),
               "cudaDeviceGetAttribute") &&
         Check(cudaDeviceGetAttribute(minor, cudaDevAttrComputeCapabilityMinor, device_),
               "cudaDeviceGetAttribute");
}

bool CudaDevice::Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  Fail(std::string(what) + " on device " + std::to_string(device_) + ": " + cudaGetErrorName(e) +
       " (" + cudaGetErrorString(e) + ")");
  return false;
}

void CudaDevice::Fail(const std::string& message) {
  if (error_.empty()) error_ = message;
}

void CudaDevice::Synchronize() {
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  if (copy_stream_ != nullptr) cudaStreamSynchronize(copy_stream_);
}

void* CudaDevice::Alloc(int64_t bytes) {
  if (!ok()) return nullptr;
  void* p = nullptr;
  const size_t size = static_cast<size_t>(std::max<int64_t>(bytes, 1));
  if (limit_ > 0 && held_ + static_cast<int64_t>(size) > limit_) {
    error_ = "cuda: " + std::to_string(bytes) + " more bytes would exceed the memory budget of " +
             std::to_string(limit_) + " (" + std::to_string(held_) + " held)";
    return nullptr;
  }
  if (!Check(cudaMalloc(&p, size), "cudaMalloc")) return nullptr;
  sizes_[p] = size;
  held_ += static_cast<int64_t>(size);
  peak_ = std::max(peak_, held_);
  return p;
}

void CudaDevice::Free(void* p) {
  auto it = sizes_.find(p);
  if (it == sizes_.end()) return;
  // Work queued on the stream may still read it.
  cudaStreamSynchronize(stream_);
  held_ -= static_cast<int64_t>(it->second);
  sizes_.erase(it);
  cudaFree(p);
}

void* CudaDevice::Grow(Scratch& scratch, int64_t bytes) {
  if (bytes <= scratch.bytes) return scratch.p;
  if (scratch.p != nullptr) Free(scratch.p);
  scratch.p = Alloc(bytes);
  scratch.bytes = scratch.p != nullptr ? bytes : 0;
  return scratch.p;
}

bool CudaDevice::PinHost(void* host, int64_t bytes) {
  if (!ok() || bytes <= 0) return false;
  if (cudaHostRegister(host, static_cast<size_t>(bytes), cudaHostRegisterDefault) != cudaSuccess) {
    // Not sticky (e.g. a page shared with memory pinned before): clear it,
    // and the copies of this memory stay ordinary ones.
    (void)cudaGetLastError();
    return false;
  }
  pinned_[static_cast<const char*>(host)] = bytes;
  return true;
}

void CudaDevice::UnpinHost(void* host) {
  auto it = pinned_.find(static_cast<const char*>(host));
  if (it == pinned_.end()) return;
  // Copies queued from or to it must land first.
  cudaStreamSynchronize(copy_stream_);
  cudaStreamSynchronize(stream_);
  pinned_.erase(it);
  // A failure leaves the memory as it was; clear it, or the next kernel's
  // check would take it for its own.
  if (cudaHostUnregister(host) != cudaSuccess) (void)cudaGetLastError();
}

bool CudaDevice::Pinned(const void* host, int64_t bytes) const {
  const char* h = static_cast<const char*>(host);
  auto it = pinned_.upper_bound(h);
  if (it == pinned_.begin()) return false;
  --it;
  return h + bytes <= it->first + it->second;
}

void CudaDevice::Upload(const void* host, int64_t bytes, void* device) {
  if (!ok() || bytes <= 0) return;
  if (!Pinned(host, bytes)) {
    // From pageable memory this returns once `host` may be reused.
    Check(
        cudaMemcpyAsync(device, host, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream_),
        "cudaMemcpyAsync to the device");
    return;
  }
  // Beside the computation: the copy engine runs it while earlier work
  // computes; work queued from now on waits for it.
  Check(cudaMemcpyAsync(device, host, static_cast<size_t>(bytes), cudaMemcpyHostToDevice,
                        copy_stream_),
        "cudaMemcpyAsync to the device") &&
      Check(cudaEventRecord(copied_, copy_stream_), "cudaEventRecord") &&
      Check(cudaStreamWaitEvent(stream_, copied_, 0), "cudaStreamWaitEvent");
}

void CudaDevice::Download(const void* device, int64_t bytes, void* host) {
  if (!ok() || bytes <= 0) return;
  DownloadAsync(device, bytes, host);
  Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

void CudaDevice::DownloadAsync(const void* device, int64_t bytes, void* host) {
  if (!ok() || bytes <= 0) return;
  // Into pageable memory cudaMemcpyAsync waits for the copy itself.
  Check(cudaMemcpyAsync(host, device, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, stream_),
        "cudaMemcpyAsync to the host");
}

int64_t CudaDevice::Fence() {
  if (!ok()) return 0;
  cudaEvent_t event = nullptr;
  if (!spare_events_.empty()) {
    event = spare_events_.back();
    spare_events_.pop_back();
  } else if (!Check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate")) {
    return 0;
  }
  if (!Check(cudaEventRecord(event, stream_), "cudaEventRecord")) {
    spare_events_.push_back(event);
    return 0;
  }
  fences_.emplace_back(++last_fence_, event);
  return last_fence_;
}

void CudaDevice::WaitFor(int64_t fence) {
  while (!fences_.empty() && fences_.front().first <= fence) {
    cudaEvent_t event = fences_.front().second;
    fences_.pop_front();
    if (ok()) Check(cudaEventSynchronize(event), "cudaEventSynchronize");
    spare_events_.push_back(event);
  }
}

bool CudaDevice::Reached(int64_t fence) {
  for (const auto& [id, event] : fences_) {
    if (id > fence) break;
    const cudaError_t e = cudaEventQuery(event);
    if (e == cudaErrorNotReady) return false;
    if (!Check(e, "cudaEventQuery")) return true;  // the error says why
  }
  WaitFor(fence);  // all done: recycles their events
  return true;
}

}  // namespace kernels
}  // namespace pstrain
