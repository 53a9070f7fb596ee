// The CUDA backend (see cuda_backend.h). Every call is queued on one stream;
// Download and SoftmaxXent wait for it. CUDA and cuBLAS errors are kept as
// the first error (error()) and later calls do nothing.
#include "kernels/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
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

// Column sums of a [rows, cols] matrix (bias and LayerNorm parameter
// gradients) in two passes: blocks of kColTile columns x kRowsPerChunk rows
// write partial sums, one per chunk of rows, and a second kernel adds each
// column's partials in order. A thread per column summing all the rows
// alone would leave most of the GPU idle (a few blocks for 768 columns).
constexpr int kColTile = 32, kRowLanes = kThreads / kColTile, kRowsPerChunk = 256;

int RowChunks(int rows) { return (rows + kRowsPerChunk - 1) / kRowsPerChunk; }

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
__global__ void ColumnPartialsKernel(int rows, int cols, Terms terms, float* partials) {
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

// out_k[j] = sum over chunks of partials[k][chunk][j], for k < count.
__global__ void SumPartialsKernel(int chunks, int cols, int count, const float* partials,
                                  float* out0, float* out1) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  for (int k = 0; k < count; ++k) {
    float total = 0.0f;
    for (int c = 0; c < chunks; ++c) total += partials[(static_cast<int64_t>(k) * chunks + c) * cols + j];
    (k == 0 ? out0 : out1)[j] = total;
  }
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


__device__ float BlockSum(float v, float* shared) {
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

__device__ float BlockMax(float v, float* shared) {
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

__global__ void ScaleKernel(int64_t n, float alpha, float* x) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    x[i] *= alpha;
  }
}

// Rounds to nearest even into 16 bits.
__global__ void ToBf16Kernel(int64_t n, const float* x, __nv_bfloat16* y) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    y[i] = __float2bfloat16_rn(x[i]);
  }
}

__global__ void ToHalfKernel(int64_t n, const float* x, __half* y) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    y[i] = __float2half_rn(x[i]);
  }
}

__global__ void AxpyKernel(int64_t n, float alpha, const float* x, float* y) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    y[i] += alpha * x[i];
  }
}

__global__ void EmbeddingKernel(int64_t n, int dim, const int32_t* ids, const float* table,
                                float* out, bool accumulate) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const float v = table[static_cast<int64_t>(ids[i / dim]) * dim + i % dim];
    out[i] = accumulate ? out[i] + v : v;
  }
}

__global__ void EmbeddingBackwardKernel(int64_t n, int dim, const int32_t* ids, const float* dout,
                                        float* dtable) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    atomicAdd(&dtable[static_cast<int64_t>(ids[i / dim]) * dim + i % dim], dout[i]);
  }
}

// One block per row.
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
  for (int j = threadIdx.x; j < dim; j += blockDim.x) yr[j] = (xr[j] - m) * inv * gamma[j] + beta[j];
  if (threadIdx.x == 0) {
    mean[r] = m;
    rstd[r] = inv;
  }
}

// One block per row: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma.
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

__device__ const float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)

__global__ void GeluKernel(int64_t n, const float* x, float* y) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + tanhf(kGeluC * (v + 0.044715f * v * v * v)));
  }
}

__global__ void GeluBackwardKernel(int64_t n, const float* x, const float* dy, float* dx) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const float v = x[i];
    const float t = tanhf(kGeluC * (v + 0.044715f * v * v * v));
    dx[i] = dy[i] * (0.5f * (1.0f + t) +
                     0.5f * v * (1.0f - t * t) * kGeluC * (1.0f + 3.0f * 0.044715f * v * v));
  }
}

// v rounded to nearest even into out16[i] (bf16 or fp16), when out16 is set.
__device__ void Store16(float v, void* out16, bool bf16, int64_t i) {
  if (out16 == nullptr) return;
  if (bf16) {
    static_cast<__nv_bfloat16*>(out16)[i] = __float2bfloat16_rn(v);
  } else {
    static_cast<__half*>(out16)[i] = __float2half_rn(v);
  }
}

// One block per row of scores [*, seq]: row t (of its sequence) keeps
// columns <= t, softmaxed; the rest become 0. With out16, a 16-bit copy too.
__global__ void CausalSoftmaxKernel(int seq, float* a, void* out16, bool bf16) {
  __shared__ float shared[kThreads];
  const int64_t row = blockIdx.x;
  const int t = static_cast<int>(row % seq);
  float* r = a + row * seq;
  float m = -INFINITY;
  for (int j = threadIdx.x; j <= t; j += blockDim.x) m = fmaxf(m, r[j]);
  m = BlockMax(m, shared);
  float s = 0.0f;
  for (int j = threadIdx.x; j <= t; j += blockDim.x) s += expf(r[j] - m);
  const float sum = BlockSum(s, shared);
  for (int j = threadIdx.x; j < seq; j += blockDim.x) {
    const float v = j <= t ? expf(r[j] - m) / sum : 0.0f;
    r[j] = v;
    Store16(v, out16, bf16, row * seq + j);
  }
}

// Through the causal softmax: d = a * (d - sum_j a d) for columns <= t, else
// 0. With out16, a 16-bit copy too.
__global__ void CausalSoftmaxBackwardKernel(int seq, const float* a, float* d, void* out16,
                                            bool bf16) {
  __shared__ float shared[kThreads];
  const int64_t row = blockIdx.x;
  const int t = static_cast<int>(row % seq);
  const float* ar = a + row * seq;
  float* dr = d + row * seq;
  float s = 0.0f;
  for (int j = threadIdx.x; j <= t; j += blockDim.x) s += ar[j] * dr[j];
  const float dot = BlockSum(s, shared);
  for (int j = threadIdx.x; j < seq; j += blockDim.x) {
    const float v = j <= t ? ar[j] * (dr[j] - dot) : 0.0f;
    dr[j] = v;
    Store16(v, out16, bf16, row * seq + j);
  }
}

// Attention works on each (sequence, head) pair's [seq, head_dim] matrices
// one batched product at a time, so it moves them side by side first:
// rows of `parts` x heads x head_dim columns (q|k|v, or one part) become
// [parts][batch][heads][seq][head_dim], and back.
template <typename T>
__device__ T FromFloat(float v);
template <>
__device__ float FromFloat<float>(float v) { return v; }
template <>
__device__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __half FromFloat<__half>(float v) { return __float2half_rn(v); }

struct HeadLayout {
  int seq, heads, head_dim, parts;
  int64_t n;  // elements: batch * seq * parts * heads * head_dim
  // The index in [parts][batch][heads][seq][head_dim] of row-layout index i.
  __device__ int64_t Split(int64_t i) const {
    const int c = heads * head_dim, width = parts * c;
    const int64_t row = i / width;
    const int col = static_cast<int>(i % width);
    const int p = col / c, h = (col % c) / head_dim, d = col % head_dim;
    const int64_t batch = n / (static_cast<int64_t>(seq) * width);
    const int64_t b = row / seq, t = row % seq;
    return (((p * batch + b) * heads + h) * seq + t) * head_dim + d;
  }
};

template <typename Out>
__global__ void SplitHeadsKernel(HeadLayout l, const float* in, Out* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < l.n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    out[l.Split(i)] = FromFloat<Out>(in[i]);
  }
}

__global__ void MergeHeadsKernel(HeadLayout l, const float* in, float* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < l.n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    out[i] = in[l.Split(i)];
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
    if (!Check(cudaStreamCreate(&copy_stream_), "cudaStreamCreate")) return;
    if (!Check(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming), "cudaEventCreate")) {
      return;
    }
    if (!CheckBlas(cublasCreate(&blas_), "cublasCreate")) return;
    CheckBlas(cublasSetStream(blas_, stream_), "cublasSetStream");
  }
  ~CudaBackend() override {
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    if (copy_stream_ != nullptr) cudaStreamSynchronize(copy_stream_);
    for (const auto& [p, bytes] : sizes_) cudaFree(p);
    for (const auto& [host, bytes] : pinned_) cudaHostUnregister(const_cast<char*>(host));
    for (const auto& [id, event] : fences_) cudaEventDestroy(event);
    for (cudaEvent_t event : spare_events_) cudaEventDestroy(event);
    if (copied_ != nullptr) cudaEventDestroy(copied_);
    if (blas_ != nullptr) cublasDestroy(blas_);
    if (copy_stream_ != nullptr) cudaStreamDestroy(copy_stream_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  const char* name() const override { return "cuda"; }
  std::string error() const override { return error_; }
  int64_t peak_bytes() const override { return peak_; }
  void SetMemoryLimit(int64_t bytes) override { limit_ = bytes; }

  void* Alloc(int64_t bytes) override {
    if (!error_.empty()) return nullptr;
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
  void Free(void* p) override {
    auto it = sizes_.find(p);
    if (it == sizes_.end()) return;
    // Work queued on the stream may still read it.
    cudaStreamSynchronize(stream_);
    held_ -= static_cast<int64_t>(it->second);
    sizes_.erase(it);
    cudaFree(p);
  }

  bool PinHost(void* host, int64_t bytes) override {
    if (!error_.empty() || bytes <= 0) return false;
    if (cudaHostRegister(host, static_cast<size_t>(bytes), cudaHostRegisterDefault) !=
        cudaSuccess) {
      // Not sticky (e.g. a page shared with memory pinned before): clear it,
      // and the copies of this memory stay ordinary ones.
      (void)cudaGetLastError();
      return false;
    }
    pinned_[static_cast<const char*>(host)] = bytes;
    return true;
  }
  void UnpinHost(void* host) override {
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

  void Upload(const void* host, int64_t bytes, void* device) override {
    if (!error_.empty() || bytes <= 0) return;
    if (!Pinned(host, bytes)) {
      // From pageable memory this returns once `host` may be reused.
      Check(cudaMemcpyAsync(device, host, static_cast<size_t>(bytes), cudaMemcpyHostToDevice,
                            stream_),
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
  void Download(const void* device, int64_t bytes, void* host) override {
    if (!error_.empty() || bytes <= 0) return;
    DownloadAsync(device, bytes, host);
    Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  void DownloadAsync(const void* device, int64_t bytes, void* host) override {
    if (!error_.empty() || bytes <= 0) return;
    // Into pageable memory cudaMemcpyAsync waits for the copy itself.
    Check(cudaMemcpyAsync(host, device, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost,
                          stream_),
          "cudaMemcpyAsync to the host");
  }
  int64_t Fence() override {
    if (!error_.empty()) return 0;
    cudaEvent_t event = nullptr;
    if (!spare_events_.empty()) {
      event = spare_events_.back();
      spare_events_.pop_back();
    } else if (!Check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                      "cudaEventCreate")) {
      return 0;
    }
    if (!Check(cudaEventRecord(event, stream_), "cudaEventRecord")) {
      spare_events_.push_back(event);
      return 0;
    }
    fences_.emplace_back(++last_fence_, event);
    return last_fence_;
  }
  void WaitFor(int64_t fence) override {
    while (!fences_.empty() && fences_.front().first <= fence) {
      cudaEvent_t event = fences_.front().second;
      fences_.pop_front();
      if (error_.empty()) Check(cudaEventSynchronize(event), "cudaEventSynchronize");
      spare_events_.push_back(event);
    }
  }

  bool Reached(int64_t fence) override {
    for (const auto& [id, event] : fences_) {
      if (id > fence) break;
      const cudaError_t e = cudaEventQuery(event);
      if (e == cudaErrorNotReady) return false;
      if (!Check(e, "cudaEventQuery")) return true;  // the error says why
    }
    WaitFor(fence);  // all done: recycles their events
    return true;
  }

  bool SetPrecision(Precision precision, std::string* why) override {
    if (precision == Precision::kBf16) {
      int major = 0;
      if (!Check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_),
                 "cudaDeviceGetAttribute")) {
        *why = error_;
        return false;
      }
      if (major < 8) {
        *why = "CUDA device " + std::to_string(device_) + " (compute capability " +
               std::to_string(major) + ".x) cannot compute in bf16 (needs 8.0 or later)";
        return false;
      }
    }
    precision_ = precision;
    return true;
  }

  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
            const float* b, float beta, float* c) override {
    if (!error_.empty()) return;
    if (precision_ != Precision::kFp32) {
      Gemm16(trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
      return;
    }
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
    CheckBlas(cublasSgemm(blas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                          trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b,
                          trans_b ? k : n, a, trans_a ? m : k, &beta, c, n),
              "cublasSgemm");
  }

  // The inputs rounded to 16 bits in scratch, multiplied by cuBLAS with fp32
  // accumulation into fp32 C.
  void Gemm16(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
              const float* b, float beta, float* c) {
    const int64_t na = static_cast<int64_t>(m) * k, nb = static_cast<int64_t>(k) * n;
    const int64_t b_at = (na + 63) / 64 * 64;  // B 128-byte aligned
    char* a16 = static_cast<char*>(Grow(gemm16_, (b_at + nb) * 2));
    if (a16 == nullptr) return;
    char* b16 = a16 + b_at * 2;
    if (!To16(a, na, a16) || !To16(b, nb, b16)) return;
    const cudaDataType type = Type16();
    CheckBlas(cublasGemmEx(blas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                           trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b16, type,
                           trans_b ? k : n, a16, type, trans_a ? m : k, &beta, c, CUDA_R_32F, n,
                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              "cublasGemmEx");
  }

  void Scale(int64_t n, float alpha, float* x) override {
    if (!error_.empty() || n == 0) return;
    ScaleKernel<<<Blocks(n), kThreads, 0, stream_>>>(n, alpha, x);
    Check(cudaGetLastError(), "Scale");
  }

  void AddBias(int rows, int cols, const float* bias, float* y) override {
    const int64_t n = static_cast<int64_t>(rows) * cols;
    if (!error_.empty() || n == 0) return;
    AddBiasKernel<<<Blocks(n), kThreads, 0, stream_>>>(n, cols, bias, y);
    Check(cudaGetLastError(), "AddBias");
  }
  void BiasGrad(int rows, int cols, const float* dy, float* db) override {
    if (!error_.empty() || cols == 0) return;
    ColumnSums(rows, cols, BiasTerms{dy}, db, nullptr, "BiasGrad");
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
    float* row_loss = static_cast<float*>(Grow(row_loss_, rows * int64_t{4}));
    int* row_right = static_cast<int*>(Grow(row_right_, rows * int64_t{4}));
    if (row_loss == nullptr || row_right == nullptr) return 0.0f;
    SoftmaxXentKernel<<<rows, kThreads, 0, stream_>>>(rows, classes, logits, labels, dlogits,
                                                      row_loss, row_right);
    if (!Check(cudaGetLastError(), "SoftmaxXent")) return 0.0f;
    host_loss_.resize(rows);
    host_right_.resize(rows);
    DownloadAsync(row_loss, rows * static_cast<int64_t>(sizeof(float)), host_loss_.data());
    Download(row_right, rows * static_cast<int64_t>(sizeof(int)), host_right_.data());
    double loss = 0.0;
    int right = 0;
    for (int r = 0; r < rows; ++r) {
      loss += host_loss_[r];
      right += host_right_[r];
    }
    if (correct != nullptr) *correct = right;
    return static_cast<float>(loss / rows);
  }

  void Axpy(int64_t n, float alpha, const float* x, float* y) override {
    if (!error_.empty() || n == 0) return;
    AxpyKernel<<<Blocks(n), kThreads, 0, stream_>>>(n, alpha, x, y);
    Check(cudaGetLastError(), "Axpy");
  }
  void Embedding(int rows, int dim, const int32_t* ids, const float* table, float* out,
                 bool accumulate) override {
    const int64_t n = static_cast<int64_t>(rows) * dim;
    if (!error_.empty() || n == 0) return;
    EmbeddingKernel<<<Blocks(n), kThreads, 0, stream_>>>(n, dim, ids, table, out, accumulate);
    Check(cudaGetLastError(), "Embedding");
  }
  void EmbeddingBackward(int rows, int dim, const int32_t* ids, const float* dout,
                         float* dtable) override {
    const int64_t n = static_cast<int64_t>(rows) * dim;
    if (!error_.empty() || n == 0) return;
    EmbeddingBackwardKernel<<<Blocks(n), kThreads, 0, stream_>>>(n, dim, ids, dout, dtable);
    Check(cudaGetLastError(), "EmbeddingBackward");
  }
  void LayerNorm(int rows, int dim, const float* x, const float* gamma, const float* beta,
                 float* y, float* mean, float* rstd) override {
    if (!error_.empty() || rows == 0) return;
    LayerNormKernel<<<rows, kThreads, 0, stream_>>>(dim, x, gamma, beta, y, mean, rstd);
    Check(cudaGetLastError(), "LayerNorm");
  }
  void LayerNormBackward(int rows, int dim, const float* x, const float* gamma,
                         const float* mean, const float* rstd, const float* dy, float* dx,
                         float* dgamma, float* dbeta) override {
    if (!error_.empty() || rows == 0) return;
    LayerNormBackwardKernel<<<rows, kThreads, 0, stream_>>>(dim, x, gamma, mean, rstd, dy, dx);
    if (!Check(cudaGetLastError(), "LayerNormBackward")) return;
    ColumnSums(rows, dim, LayerNormTerms{x, mean, rstd, dy}, dgamma, dbeta, "LayerNormBackward");
  }
  void Gelu(int64_t n, const float* x, float* y) override {
    if (!error_.empty() || n == 0) return;
    GeluKernel<<<Blocks(n), kThreads, 0, stream_>>>(n, x, y);
    Check(cudaGetLastError(), "Gelu");
  }
  void GeluBackward(int64_t n, const float* x, const float* dy, float* dx) override {
    if (!error_.empty() || n == 0) return;
    GeluBackwardKernel<<<Blocks(n), kThreads, 0, stream_>>>(n, x, dy, dx);
    Check(cudaGetLastError(), "GeluBackward");
  }

  // The heads of every sequence side by side (SplitHeads), then one
  // strided-batched product over all (sequence, head) pairs per step. In
  // 16-bit precision the products take q, k, v and the attention weights
  // rounded to 16 bits (the softmax itself stays fp32).
  void Attention(int batch, int seq, int heads, int head_dim, const float* qkv, float* att,
                 float* out) override {
    if (!error_.empty() || batch == 0) return;
    const int pairs = batch * heads;
    const int64_t tt = static_cast<int64_t>(seq) * seq, per = static_cast<int64_t>(seq) * head_dim;
    const float scale = 1.0f / sqrtf(static_cast<float>(head_dim));
    const bool half = precision_ != Precision::kFp32;
    const HeadLayout three{seq, heads, head_dim, 3, 3 * pairs * per};
    const HeadLayout one{seq, heads, head_dim, 1, pairs * per};
    const char* q = SplitHeads(three, qkv, qkv_heads_);
    float* o = static_cast<float*>(Grow(o_heads_, one.n * 4));
    char* a16 = half ? static_cast<char*>(Grow(att16_, pairs * tt * 2)) : nullptr;
    if (q == nullptr || o == nullptr || (half && a16 == nullptr)) return;
    const char* k = q + Bytes(pairs * per);
    const char* v = q + Bytes(2 * pairs * per);
    // a = scale * q k^T; softmax; o = a v
    if (!Batched(CUBLAS_OP_T, CUBLAS_OP_N, seq, seq, head_dim, scale, k, head_dim, per, q,
                 head_dim, per, att, seq, tt, pairs, "scores")) {
      return;
    }
    CausalSoftmaxKernel<<<pairs * seq, kThreads, 0, stream_>>>(seq, att, a16, Bf16());
    if (!Batched(CUBLAS_OP_N, CUBLAS_OP_N, head_dim, seq, seq, 1.0f, v, head_dim, per,
                 half ? a16 : reinterpret_cast<const char*>(att), seq, tt, o, head_dim, per, pairs,
                 "values")) {
      return;
    }
    MergeHeadsKernel<<<Blocks(one.n), kThreads, 0, stream_>>>(one, o, out);
    Check(cudaGetLastError(), "Attention");
  }

  void AttentionBackward(int batch, int seq, int heads, int head_dim, const float* qkv,
                         const float* att, const float* dout, float* dqkv) override {
    if (!error_.empty() || batch == 0) return;
    const int pairs = batch * heads;
    const int64_t tt = static_cast<int64_t>(seq) * seq, per = static_cast<int64_t>(seq) * head_dim;
    const float scale = 1.0f / sqrtf(static_cast<float>(head_dim));
    const bool half = precision_ != Precision::kFp32;
    const HeadLayout three{seq, heads, head_dim, 3, 3 * pairs * per};
    const HeadLayout one{seq, heads, head_dim, 1, pairs * per};
    const char* q = SplitHeads(three, qkv, qkv_heads_);
    const char* d_o = SplitHeads(one, dout, dout_heads_);
    float* dq = static_cast<float*>(Grow(dqkv_heads_, three.n * 4));
    float* ds = static_cast<float*>(Grow(scores_, pairs * tt * 4));
    char* a16 = half ? static_cast<char*>(Grow(att16_, pairs * tt * 2)) : nullptr;
    char* ds16 = half ? static_cast<char*>(Grow(ds16_, pairs * tt * 2)) : nullptr;
    if (q == nullptr || d_o == nullptr || dq == nullptr || ds == nullptr ||
        (half && (a16 == nullptr || ds16 == nullptr))) {
      return;
    }
    const char* k = q + Bytes(pairs * per);
    const char* v = q + Bytes(2 * pairs * per);
    float* dk = dq + pairs * per;
    float* dv = dq + 2 * pairs * per;
    if (half && !To16(att, pairs * tt, a16)) return;
    const char* a_in = half ? a16 : reinterpret_cast<const char*>(att);
    // dv = a^T do; ds = do v^T
    if (!Batched(CUBLAS_OP_N, CUBLAS_OP_T, head_dim, seq, seq, 1.0f, d_o, head_dim, per, a_in,
                 seq, tt, dv, head_dim, per, pairs, "dv") ||
        !Batched(CUBLAS_OP_T, CUBLAS_OP_N, seq, seq, head_dim, 1.0f, v, head_dim, per, d_o,
                 head_dim, per, ds, seq, tt, pairs, "dscores")) {
      return;
    }
    CausalSoftmaxBackwardKernel<<<pairs * seq, kThreads, 0, stream_>>>(seq, att, ds, ds16, Bf16());
    const char* ds_in = half ? ds16 : reinterpret_cast<const char*>(ds);
    // dq = scale * ds k; dk = scale * ds^T q
    if (!Batched(CUBLAS_OP_N, CUBLAS_OP_N, head_dim, seq, seq, scale, k, head_dim, per, ds_in,
                 seq, tt, dq, head_dim, per, pairs, "dq") ||
        !Batched(CUBLAS_OP_N, CUBLAS_OP_T, head_dim, seq, seq, scale, q, head_dim, per, ds_in,
                 seq, tt, dk, head_dim, per, pairs, "dk")) {
      return;
    }
    MergeHeadsKernel<<<Blocks(three.n), kThreads, 0, stream_>>>(three, dq, dqkv);
    Check(cudaGetLastError(), "AttentionBackward");
  }

 private:
  // Device scratch that grows to the largest size asked of it.
  struct Scratch {
    void* p = nullptr;
    int64_t bytes = 0;
  };

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
  // `bytes` of `scratch`, or null (error() says why).
  void* Grow(Scratch& scratch, int64_t bytes) {
    if (bytes <= scratch.bytes) return scratch.p;
    if (scratch.p != nullptr) Free(scratch.p);
    scratch.p = Alloc(bytes);
    scratch.bytes = scratch.p != nullptr ? bytes : 0;
    return scratch.p;
  }
  // Whether [host, host + bytes) lies in memory pinned by PinHost.
  bool Pinned(const void* host, int64_t bytes) const {
    const char* h = static_cast<const char*>(host);
    auto it = pinned_.upper_bound(h);
    if (it == pinned_.begin()) return false;
    --it;
    return h + bytes <= it->first + it->second;
  }

  bool Bf16() const { return precision_ == Precision::kBf16; }
  cudaDataType Type16() const { return Bf16() ? CUDA_R_16BF : CUDA_R_16F; }
  // Bytes of n elements of the products' input type.
  int64_t Bytes(int64_t n) const { return n * (precision_ == Precision::kFp32 ? 4 : 2); }
  // x [n] rounded into out (n 16-bit values of the precision's type).
  bool To16(const float* x, int64_t n, void* out) {
    if (Bf16()) {
      ToBf16Kernel<<<Blocks(n), kThreads, 0, stream_>>>(n, x, static_cast<__nv_bfloat16*>(out));
    } else {
      ToHalfKernel<<<Blocks(n), kThreads, 0, stream_>>>(n, x, static_cast<__half*>(out));
    }
    return Check(cudaGetLastError(), "rounding to 16 bits");
  }
  // x in the heads' layout `l`, in the products' input type, in `scratch`.
  const char* SplitHeads(const HeadLayout& l, const float* x, Scratch& scratch) {
    void* out = Grow(scratch, Bytes(l.n));
    if (out == nullptr) return nullptr;
    if (precision_ == Precision::kFp32) {
      SplitHeadsKernel<<<Blocks(l.n), kThreads, 0, stream_>>>(l, x, static_cast<float*>(out));
    } else if (Bf16()) {
      SplitHeadsKernel<<<Blocks(l.n), kThreads, 0, stream_>>>(
          l, x, static_cast<__nv_bfloat16*>(out));
    } else {
      SplitHeadsKernel<<<Blocks(l.n), kThreads, 0, stream_>>>(l, x, static_cast<__half*>(out));
    }
    if (!Check(cudaGetLastError(), "SplitHeads")) return nullptr;
    return static_cast<const char*>(out);
  }
  // Column-major strided-batched C = alpha op(A) op(B) of inputs in the
  // products' type (Bytes), fp32 C, fp32 accumulation.
  bool Batched(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
               const char* a, int lda, int64_t stride_a, const char* b, int ldb,
               int64_t stride_b, float* c, int ldc, int64_t stride_c, int count,
               const char* what) {
    const float zero = 0.0f;
    if (precision_ == Precision::kFp32) {
      return CheckBlas(cublasSgemmStridedBatched(
                           blas_, ta, tb, m, n, k, &alpha, reinterpret_cast<const float*>(a), lda,
                           stride_a, reinterpret_cast<const float*>(b), ldb, stride_b, &zero, c,
                           ldc, stride_c, count),
                       what);
    }
    const cudaDataType type = Type16();
    return CheckBlas(cublasGemmStridedBatchedEx(blas_, ta, tb, m, n, k, &alpha, a, type, lda,
                                                stride_a, b, type, ldb, stride_b, &zero, c,
                                                CUDA_R_32F, ldc, stride_c, count,
                                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     what);
  }
  // out0[j] (and out1[j] for Terms with two) = the sum over rows of Terms.
  template <typename Terms>
  void ColumnSums(int rows, int cols, Terms terms, float* out0, float* out1, const char* what) {
    const int chunks = std::max(RowChunks(rows), 1);
    float* partials = static_cast<float*>(
        Grow(partials_, static_cast<int64_t>(Terms::kCount) * chunks * cols * 4));
    if (partials == nullptr) return;
    const dim3 grid((cols + kColTile - 1) / kColTile, chunks), block(kColTile, kRowLanes);
    ColumnPartialsKernel<Terms><<<grid, block, 0, stream_>>>(rows, cols, terms, partials);
    SumPartialsKernel<<<(cols + kThreads - 1) / kThreads, kThreads, 0, stream_>>>(
        chunks, cols, Terms::kCount, partials, out0, out1);
    Check(cudaGetLastError(), what);
  }

  const int device_;
  cudaStream_t stream_ = nullptr;
  cudaStream_t copy_stream_ = nullptr;  // uploads from pinned memory
  cudaEvent_t copied_ = nullptr;        // the last of them
  cublasHandle_t blas_ = nullptr;
  std::string error_;
  std::unordered_map<void*, size_t> sizes_;
  int64_t held_ = 0, peak_ = 0, limit_ = 0;
  std::map<const char*, int64_t> pinned_;  // start -> bytes
  std::deque<std::pair<int64_t, cudaEvent_t>> fences_;
  std::vector<cudaEvent_t> spare_events_;
  int64_t last_fence_ = 0;
  Precision precision_ = Precision::kFp32;
  Scratch row_loss_, row_right_, gemm16_, scores_, partials_, att16_, ds16_;
  // Attention's operands in the heads' layout.
  Scratch qkv_heads_, o_heads_, dout_heads_, dqkv_heads_;
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
