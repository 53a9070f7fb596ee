// An array of T in a backend's device memory, freed when it goes.
#ifndef PSTRAIN_KERNELS_DEVICE_ARRAY_H_
#define PSTRAIN_KERNELS_DEVICE_ARRAY_H_

#include <cstdint>
#include <utility>

#include "kernels/backend.h"

namespace pstrain {
namespace kernels {

template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(Backend* backend = nullptr) : backend_(backend) {}
  DeviceArray(Backend* backend, int64_t n) : backend_(backend) { Resize(n); }
  DeviceArray(DeviceArray&& o) noexcept
      : backend_(o.backend_), data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)), capacity_(std::exchange(o.capacity_, 0)) {}
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    std::swap(backend_, o.backend_);
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(capacity_, o.capacity_);
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { Release(); }

  // Makes room for n elements; the contents are undefined after growing.
  // False (and the backend's error() says why) when the device has no room.
  bool Resize(int64_t n) {
    if (n > capacity_) {
      Release();
      data_ = static_cast<T*>(backend_->Alloc(n * static_cast<int64_t>(sizeof(T))));
      if (data_ == nullptr) return false;
      capacity_ = n;
    }
    size_ = n;
    return true;
  }
  void Release() {
    if (data_ != nullptr) backend_->Free(data_);
    data_ = nullptr;
    size_ = capacity_ = 0;
  }
  void Upload(const T* host) {
    backend_->Upload(host, size_ * static_cast<int64_t>(sizeof(T)), data_);
  }
  void Download(T* host) const {
    backend_->Download(data_, size_ * static_cast<int64_t>(sizeof(T)), host);
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  int64_t size() const { return size_; }

 private:
  Backend* backend_;
  T* data_ = nullptr;
  int64_t size_ = 0;
  int64_t capacity_ = 0;
};

}  // namespace kernels
}  // namespace pstrain

#endif  // PSTRAIN_KERNELS_DEVICE_ARRAY_H_
