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

// One thread per column: dgamma and dbeta summed down the rows.
__global__ void LayerNormParamGradKernel(int rows, int dim, const float* x, const float* mean,
                                         const float* rstd, const float* dy, float* dgamma,
                                         float* dbeta) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= dim) return;
  float g = 0.0f, b = 0.0f;
  for (int r = 0; r < rows; ++r) {
    const int64_t i = static_cast<int64_t>(r) * dim + j;
    g += dy[i] * (x[i] - mean[r]) * rstd[r];
    b += dy[i];
  }
  dgamma[j] = g;
  dbeta[j] = b;
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

// One block per row of scores [*, seq]: row t (of its sequence) keeps
// columns <= t, softmaxed; the rest become 0.
__global__ void CausalSoftmaxKernel(int seq, float* a) {
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
  for (int j = threadIdx.x; j < seq; j += blockDim.x) r[j] = j <= t ? expf(r[j] - m) / sum : 0.0f;
}

// Through the causal softmax: d = a * (d - sum_j a d) for columns <= t, else 0.
__global__ void CausalSoftmaxBackwardKernel(int seq, const float* a, float* d) {
  __shared__ float shared[kThreads];
  const int64_t row = blockIdx.x;
  const int t = static_cast<int>(row % seq);
  const float* ar = a + row * seq;
  float* dr = d + row * seq;
  float s = 0.0f;
  for (int j = threadIdx.x; j <= t; j += blockDim.x) s += ar[j] * dr[j];
  const float dot = BlockSum(s, shared);
  for (int j = threadIdx.x; j < seq; j += blockDim.x) dr[j] = j <= t ? ar[j] * (dr[j] - dot) : 0.0f;
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
    if (!Reserve16(b_at + nb)) return;
    const bool bf16 = precision_ == Precision::kBf16;
    void* a16 = half_;
    void* b16 = static_cast<char*>(half_) + b_at * 2;
    if (bf16) {
      ToBf16Kernel<<<Blocks(na), kThreads, 0, stream_>>>(na, a, static_cast<__nv_bfloat16*>(a16));
      ToBf16Kernel<<<Blocks(nb), kThreads, 0, stream_>>>(nb, b, static_cast<__nv_bfloat16*>(b16));
    } else {
      ToHalfKernel<<<Blocks(na), kThreads, 0, stream_>>>(na, a, static_cast<__half*>(a16));
      ToHalfKernel<<<Blocks(nb), kThreads, 0, stream_>>>(nb, b, static_cast<__half*>(b16));
    }
    if (!Check(cudaGetLastError(), "Gemm (rounding to 16 bits)")) return;
    const cudaDataType type = bf16 ? CUDA_R_16BF : CUDA_R_16F;
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
    LayerNormParamGradKernel<<<(dim + kThreads - 1) / kThreads, kThreads, 0, stream_>>>(
        rows, dim, x, mean, rstd, dy, dgamma, dbeta);
    Check(cudaGetLastError(), "LayerNormBackward");
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

  // Per sequence, one strided-batched product over the heads: head h's
  // query, key and value start h*head_dim columns in, its scores h*seq*seq
  // floats in. Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
  void Attention(int batch, int seq, int heads, int head_dim, const float* qkv, float* att,
                 float* out) override {
    if (!error_.empty() || batch == 0) return;
    const int c = heads * head_dim, w3 = 3 * c;
    const int64_t tt = static_cast<int64_t>(seq) * seq;
    const float scale = 1.0f / sqrtf(static_cast<float>(head_dim)), one = 1.0f, zero = 0.0f;
    for (int b = 0; b < batch; ++b) {
      const float* q = qkv + static_cast<int64_t>(b) * seq * w3;
      const float* k = q + c;
      const float* v = q + 2 * c;
      float* a = att + b * heads * tt;
      float* o = out + static_cast<int64_t>(b) * seq * c;
      // a = scale * q k^T
      if (!CheckBlas(cublasSgemmStridedBatched(blas_, CUBLAS_OP_T, CUBLAS_OP_N, seq, seq, head_dim,
                                               &scale, k, w3, head_dim, q, w3, head_dim, &zero, a,
                                               seq, tt, heads),
                     "cublasSgemmStridedBatched (scores)")) {
        return;
      }
      CausalSoftmaxKernel<<<heads * seq, kThreads, 0, stream_>>>(seq, a);
      // o = a v
      if (!CheckBlas(cublasSgemmStridedBatched(blas_, CUBLAS_OP_N, CUBLAS_OP_N, head_dim, seq, seq,
                                               &one, v, w3, head_dim, a, seq, tt, &zero, o, c,
                                               head_dim, heads),
                     "cublasSgemmStridedBatched (values)")) {
        return;
      }
    }
    Check(cudaGetLastError(), "Attention");
  }

  void AttentionBackward(int batch, int seq, int heads, int head_dim, const float* qkv,
                         const float* att, const float* dout, float* dqkv) override {
    if (!error_.empty() || batch == 0) return;
    const int c = heads * head_dim, w3 = 3 * c;
    const int64_t tt = static_cast<int64_t>(seq) * seq;
    if (!ReserveScores(heads * tt)) return;
    const float scale = 1.0f / sqrtf(static_cast<float>(head_dim)), one = 1.0f, zero = 0.0f;
    float* ds = scores_;
    for (int b = 0; b < batch; ++b) {
      const int64_t base = static_cast<int64_t>(b) * seq * w3;
      const float* q = qkv + base;
      const float* k = q + c;
      const float* v = q + 2 * c;
      float* dq = dqkv + base;
      float* dk = dq + c;
      float* dv = dq + 2 * c;
      const float* a = att + b * heads * tt;
      const float* d_o = dout + static_cast<int64_t>(b) * seq * c;
      bool ok =
          // dv = a^T do
          CheckBlas(cublasSgemmStridedBatched(blas_, CUBLAS_OP_N, CUBLAS_OP_T, head_dim, seq, seq,
                                              &one, d_o, c, head_dim, a, seq, tt, &zero, dv, w3,
                                              head_dim, heads),
                    "cublasSgemmStridedBatched (dv)") &&
          // ds = do v^T
          CheckBlas(cublasSgemmStridedBatched(blas_, CUBLAS_OP_T, CUBLAS_OP_N, seq, seq, head_dim,
                                              &one, v, w3, head_dim, d_o, c, head_dim, &zero, ds,
                                              seq, tt, heads),
                    "cublasSgemmStridedBatched (dscores)");
      if (!ok) return;
      CausalSoftmaxBackwardKernel<<<heads * seq, kThreads, 0, stream_>>>(seq, a, ds);
      ok =
          // dq = scale * ds k
          CheckBlas(cublasSgemmStridedBatched(blas_, CUBLAS_OP_N, CUBLAS_OP_N, head_dim, seq, seq,
                                              &scale, k, w3, head_dim, ds, seq, tt, &zero, dq, w3,
                                              head_dim, heads),
                    "cublasSgemmStridedBatched (dq)") &&
          // dk = scale * ds^T q
          CheckBlas(cublasSgemmStridedBatched(blas_, CUBLAS_OP_N, CUBLAS_OP_T, head_dim, seq, seq,
                                              &scale, q, w3, head_dim, ds, seq, tt, &zero, dk, w3,
                                              head_dim, heads),
                    "cublasSgemmStridedBatched (dk)");
      if (!ok) return;
    }
    Check(cudaGetLastError(), "AttentionBackward");
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

  // Scratch of Gemm16: `n` 16-bit values.
  bool Reserve16(int64_t n) {
    if (n <= half_size_) return true;
    if (half_ != nullptr) Free(half_);
    half_ = Alloc(n * 2);
    half_size_ = half_ != nullptr ? n : 0;
    return half_ != nullptr;
  }

  // Scratch of AttentionBackward: one sequence's score gradients.
  bool ReserveScores(int64_t n) {
    if (n <= scores_size_) return true;
    if (scores_ != nullptr) Free(scores_);
    scores_ = static_cast<float*>(Alloc(n * static_cast<int64_t>(sizeof(float))));
    scores_size_ = scores_ != nullptr ? n : 0;
    return scores_ != nullptr;
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
  float* scores_ = nullptr;
  int64_t scores_size_ = 0;
  Precision precision_ = Precision::kFp32;
  void* half_ = nullptr;
  int64_t half_size_ = 0;
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
