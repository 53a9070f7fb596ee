// The CUDA backend (see cuda_backend.h). Every call is queued on one stream;
// Download and SoftmaxXent wait for it. CUDA and cuBLAS errors are kept as
// the first error (error()) and later calls do nothing.
#include "kernels/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>
#include <vector>

namespace pstrain {
namespace kernels {
namespace {

constexpr int kThreads = 256;

int Blocks(int64_t n) {
  return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 1 << 16));
}

__global__ void AddBiasKernel(int64_t n, int cols, const float* bias, float* y) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    y[i] += bias[i % cols];
  }
}

// One thread per column, summing down the rows in order (as the CPU does).
__global__ void BiasGradKernel(int rows, int cols, const float* dy, float* db) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  float sum = 0.0f;
  for (int r = 0; r < rows; ++r) sum += dy[static_cast<int64_t>(r) * cols + j];
  db[j] = sum;
}

__global__ void ReluForwardKernel(int64_t n, const float* x, float* y) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    y[i] = x[i] > 0.0f ? x[i] : 0.0f;
  }
}

__global__ void ReluBackwardKernel(int64_t n, const float* y, const float* dy, float* dx) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
  }
}

// One block of kThreads per row: the row's maximum (first index on ties),
// the log of its sum of exponentials, the row's loss and whether the arg-max
// is the label; the gradient (softmax - onehot) / rows when dlogits is set.
// A label outside [0, classes) gives a NaN loss.
__global__ void SoftmaxXentKernel(int rows, int classes, const float* logits,
                                  const int32_t* labels, float* dlogits, float* row_loss,
                                  int* row_right) {
  __shared__ float best[kThreads];
  __shared__ int best_at[kThreads];
  __shared__ float sums[kThreads];
  const int r = blockIdx.x;
  const float* z = logits + static_cast<int64_t>(r) * classes;
  float m = -INFINITY;
  int at = classes;
  for (int j = threadIdx.x; j < classes; j += blockDim.x) {
    if (z[j] > m || (z[j] == m && j < at)) {
      m = z[j];
      at = j;
    }
  }
  best[threadIdx.x] = m;
  best_at[threadIdx.x] = at;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) {
      const float o = best[threadIdx.x + s];
      const int o_at = best_at[threadIdx.x + s];
      if (o > best[threadIdx.x] || (o == best[threadIdx.x] && o_at < best_at[threadIdx.x])) {
        best[threadIdx.x] = o;
        best_at[threadIdx.x] = o_at;
      }
    }
    __syncthreads();
  }
  const float zmax = best[0];
  float sum = 0.0f;
  for (int j = threadIdx.x; j < classes; j += blockDim.x) sum += expf(z[j] - zmax);
  sums[threadIdx.x] = sum;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) sums[threadIdx.x] += sums[threadIdx.x + s];
    __syncthreads();
  }
  const float log_sum = logf(sums[0]);
  const int label = labels[r];
  const bool valid = label >= 0 && label < classes;
  if (threadIdx.x == 0) {
    row_loss[r] = valid ? log_sum - (z[label] - zmax) : NAN;
    row_right[r] = valid && best_at[0] == label ? 1 : 0;
  }
  if (dlogits != nullptr) {
    const float inv_rows = 1.0f / static_cast<float>(rows);
    float* d = dlogits + static_cast<int64_t>(r) * classes;
    for (int j = threadIdx.x; j < classes; j += blockDim.x) {
      const float p = expf(z[j] - zmax - log_sum);
      d[j] = (p - (j == label ? 1.0f : 0.0f)) * inv_rows;
    }
  }
}

const char* CublasName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "cuBLAS error";
  }
}

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    if (!Check(cudaSetDevice(device), "cudaSetDevice")) return;
    if (!Check(cudaStreamCreate(&stream_), "cudaStreamCreate")) return;
    if (!CheckBlas(cublasCreate(&blas_), "cublasCreate")) return;
    CheckBlas(cublasSetStream(blas_, stream_), "cublasSetStream");
  }
  ~CudaBackend() override {
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    for (const auto& [p, bytes] : sizes_) cudaFree(p);
    if (blas_ != nullptr) cublasDestroy(blas_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  const char* name() const override { return "cuda"; }
  std::string error() const override { return error_; }
  int64_t peak_bytes() const override { return peak_; }

  void* Alloc(int64_t bytes) override {
    if (!error_.empty()) return nullptr;
    void* p = nullptr;
    const size_t size = static_cast<size_t>(std::max<int64_t>(bytes, 1));
    if (!Check(cudaMalloc(&p, size), "cudaMalloc")) return nullptr;
    sizes_[p] = size;
    held_ += static_cast<int64_t>(size);
    peak_ = std::max(peak_, held_);
    return p;
  }
  void Free(void* p) override {
    auto it = sizes_.find(p);
    if (it == sizes_.end()) return;
    // Work queued on the stream may still read it.
    cudaStreamSynchronize(stream_);
    held_ -= static_cast<int64_t>(it->second);
    sizes_.erase(it);
    cudaFree(p);
  }
  void Upload(const void* host, int64_t bytes, void* device) override {
    if (!error_.empty() || bytes <= 0) return;
    // From pageable memory this returns once `host` may be reused.
    Check(cudaMemcpyAsync(device, host, static_cast<size_t>(bytes), cudaMemcpyHostToDevice,
                          stream_),
          "cudaMemcpyAsync to the device");
  }
  void Download(const void* device, int64_t bytes, void* host) override {
    if (!error_.empty() || bytes <= 0) return;
    if (!Check(cudaMemcpyAsync(host, device, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost,
                               stream_),
               "cudaMemcpyAsync to the host")) {
      return;
    }
    Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
            const float* b, float beta, float* c) override {
    if (!error_.empty()) return;
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
    CheckBlas(cublasSgemm(blas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                          trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b,
                          trans_b ? k : n, a, trans_a ? m : k, &beta, c, n),
              "cublasSgemm");
  }

  void AddBias(int rows, int cols, const float* bias, float* y) override {
    const int64_t n = static_cast<int64_t>(rows) * cols;
    if (!error_.empty() || n == 0) return;
    AddBiasKernel<<<Blocks(n), kThreads, 0, stream_>>>(n, cols, bias, y);
    Check(cudaGetLastError(), "AddBias");
  }
  void BiasGrad(int rows, int cols, const float* dy, float* db) override {
    if (!error_.empty() || cols == 0) return;
    BiasGradKernel<<<(cols + kThreads - 1) / kThreads, kThreads, 0, stream_>>>(rows, cols, dy, db);
    Check(cudaGetLastError(), "BiasGrad");
  }
  void ReluForward(int64_t n, const float* x, float* y) override {
    if (!error_.empty() || n == 0) return;
    ReluForwardKernel<<<Blocks(n), kThreads, 0, stream_>>>(n, x, y);
    Check(cudaGetLastError(), "ReluForward");
  }
  void ReluBackward(int64_t n, const float* y, const float* dy, float* dx) override {
    if (!error_.empty() || n == 0) return;
    ReluBackwardKernel<<<Blocks(n), kThreads, 0, stream_>>>(n, y, dy, dx);
    Check(cudaGetLastError(), "ReluBackward");
  }
  float SoftmaxXent(int rows, int classes, const float* logits, const int32_t* labels,
                    float* dlogits, int* correct) override {
    if (correct != nullptr) *correct = 0;
    if (!error_.empty() || rows == 0) return 0.0f;
    if (!Reserve(rows)) return 0.0f;
    SoftmaxXentKernel<<<rows, kThreads, 0, stream_>>>(rows, classes, logits, labels, dlogits,
                                                      row_loss_, row_right_);
    if (!Check(cudaGetLastError(), "SoftmaxXent")) return 0.0f;
    host_loss_.resize(rows);
    host_right_.resize(rows);
    Download(row_loss_, rows * static_cast<int64_t>(sizeof(float)), host_loss_.data());
    Download(row_right_, rows * static_cast<int64_t>(sizeof(int)), host_right_.data());
    double loss = 0.0;
    int right = 0;
    for (int r = 0; r < rows; ++r) {
      loss += host_loss_[r];
      right += host_right_[r];
    }
    if (correct != nullptr) *correct = right;
    return static_cast<float>(loss / rows);
  }

 private:
  bool Check(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return true;
    if (error_.empty()) {
      error_ = std::string(what) + " on device " + std::to_string(device_) + ": " +
               cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
    }
    return false;
  }
  bool CheckBlas(cublasStatus_t s, const char* what) {
    if (s == CUBLAS_STATUS_SUCCESS) return true;
    if (error_.empty()) {
      error_ = std::string(what) + " on device " + std::to_string(device_) + ": " + CublasName(s);
    }
    return false;
  }
  // Per-row scratch of SoftmaxXent for `rows` rows.
  bool Reserve(int rows) {
    if (rows <= scratch_rows_) return true;
    if (row_loss_ != nullptr) Free(row_loss_);
    if (row_right_ != nullptr) Free(row_right_);
    row_loss_ = static_cast<float*>(Alloc(rows * static_cast<int64_t>(sizeof(float))));
    row_right_ = static_cast<int*>(Alloc(rows * static_cast<int64_t>(sizeof(int))));
    scratch_rows_ = row_loss_ != nullptr && row_right_ != nullptr ? rows : 0;
    return scratch_rows_ > 0;
  }

  const int device_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  std::string error_;
  std::unordered_map<void*, size_t> sizes_;
  int64_t held_ = 0, peak_ = 0;
  float* row_loss_ = nullptr;
  int* row_right_ = nullptr;
  int scratch_rows_ = 0;
  std::vector<float> host_loss_;
  std::vector<int> host_right_;
};

}  // namespace

bool CudaBackendBuilt() { return true; }

std::unique_ptr<Backend> MakeCudaBackend(int device, std::string* error) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    *error = std::string("no usable CUDA device: ") + cudaGetErrorName(e) + " (" +
             cudaGetErrorString(e) + ")";
    return nullptr;
  }
  if (device < 0 || device >= count) {
    *error = "no CUDA device " + std::to_string(device) + " (this machine has " +
             std::to_string(count) + ")";
    return nullptr;
  }
  auto backend = std::make_unique<CudaBackend>(device);
  if (!backend->error().empty()) {
    *error = backend->error();
    return nullptr;
  }
  return backend;
}

}  // namespace kernels
}  // namespace pstrain
