// The CUDA backend's op dispatch (see cuda_backend.h): the Backend
// interface over a CudaDevice (memory, streams, fences and the sticky error;
// device.cuh), cuBLAS for the matrix products, and the kernels of
// elementwise.cuh, column_sums.cuh, layernorm.cuh, softmax_xent.cuh and
// attention.cuh, and in 16 bits cuDNN's attention (library_attention.cuh).
// Every op is queued on the device's one computation
// stream; Download and SoftmaxXent wait for it. CUDA and cuBLAS errors are
// kept as the first error (error()) and later calls do nothing.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/layernorm.cuh"
#include "kernels/cuda/library_attention.cuh"
#include "kernels/cuda/softmax_xent.cuh"

namespace pstrain {
namespace kernels {
namespace {

const char* CublasName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
      return "cuBLAS error";
  }
}

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    if (!device_.ok()) return;
    if (!CheckBlas(cublasCreate(&blas_), "cublasCreate")) return;
    CheckBlas(cublasSetStream(blas_, device_.stream()), "cublasSetStream");
  }
  ~CudaBackend() override {
    device_.Synchronize();
    if (blas_ != nullptr) cublasDestroy(blas_);
  }

  const char* name() const override { return "cuda"; }
  std::string error() const override { return device_.error(); }
  int64_t peak_bytes() const override { return device_.peak_bytes(); }
  void SetMemoryLimit(int64_t bytes) override { device_.SetMemoryLimit(bytes); }
  void* Alloc(int64_t bytes) override { return device_.Alloc(bytes); }
  void Free(void* p) override { device_.Free(p); }
  bool PinHost(void* host, int64_t bytes) override { return device_.PinHost(host, bytes); }
  void UnpinHost(void* host) override { device_.UnpinHost(host); }
  void Upload(const void* host, int64_t bytes, void* device) override {
    device_.Upload(host, bytes, device);
  }
  void Download(const void* device, int64_t bytes, void* host) override {
    device_.Download(device, bytes, host);
  }
  void DownloadAsync(const void* device, int64_t bytes, void* host) override {
    device_.DownloadAsync(device, bytes, host);
  }
  int64_t Fence() override { return device_.Fence(); }
  void WaitFor(int64_t fence) override { device_.WaitFor(fence); }
  bool Reached(int64_t fence) override { return device_.Reached(fence); }

  bool SetPrecision(Precision precision, std::string* why) override {
    if (precision == Precision::kBf16 && !ComputeCapabilityAtLeast8("bf16", why)) return false;
    precision_ = precision;
    return true;
  }

  bool AllowTf32(bool allow, std::string* why) override {
    if (allow && !ComputeCapabilityAtLeast8("TF32", why)) return false;
    const cublasMath_t mode = allow ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
    if (!CheckBlas(cublasSetMathMode(blas_, mode), "cublasSetMathMode")) {
      *why = device_.error();
      return false;
    }
    return true;
  }

  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
            const float* b, float beta, float* c) override {
    if (!device_.ok()) return;
    if (precision_ != Precision::kFp32) {
      Gemm16(trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
      return;
    }
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
    CheckBlas(
        cublasSgemm(blas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                    n, m, k, &alpha, b, trans_b ? k : n, a, trans_a ? m : k, &beta, c, n),
        "cublasSgemm");
  }

  // The inputs rounded to 16 bits in scratch, multiplied by cuBLAS with fp32
  // accumulation into fp32 C.
  void Gemm16(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
              const float* b, float beta, float* c) {
    const int64_t na = static_cast<int64_t>(m) * k, nb = static_cast<int64_t>(k) * n;
    const int64_t b_at = (na + 63) / 64 * 64;  // B 128-byte aligned
    char* a16 = static_cast<char*>(device_.Grow(gemm16_, (b_at + nb) * 2));
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
    if (n != 0) device_.Launch("Scale", ScaleKernel, Blocks(n), kThreads, n, alpha, x);
  }
  void AddBias(int rows, int cols, const float* bias, float* y) override {
    const int64_t n = static_cast<int64_t>(rows) * cols;
    if (n != 0) device_.Launch("AddBias", AddBiasKernel, Blocks(n), kThreads, n, cols, bias, y);
  }
  void BiasGrad(int rows, int cols, const float* dy, float* db) override {
    if (!device_.ok() || cols == 0) return;
    const int chunks = std::max(RowChunks(rows), 1);
    float* partials = Partials(1, chunks, cols);
    if (partials == nullptr) return;
    device_.Launch("BiasGrad", BiasPartialsKernel, PartialsGrid(cols, chunks), PartialsBlock(),
                   rows, cols, dy, partials) &&
        SumPartials("BiasGrad", 1, chunks, cols, partials, db, nullptr);
  }
  void ReluForward(int64_t n, const float* x, float* y) override {
    if (n != 0) device_.Launch("ReluForward", ReluForwardKernel, Blocks(n), kThreads, n, x, y);
  }
  void ReluBackward(int64_t n, const float* y, const float* dy, float* dx) override {
    if (n != 0) {
      device_.Launch("ReluBackward", ReluBackwardKernel, Blocks(n), kThreads, n, y, dy, dx);
    }
  }
  float SoftmaxXent(int rows, int classes, const float* logits, const int32_t* labels,
                    float* dlogits, int* correct) override {
    if (correct != nullptr) *correct = 0;
    if (!device_.ok() || rows == 0) return 0.0f;
    float* row_loss = static_cast<float*>(device_.Grow(row_loss_, rows * int64_t{4}));
    int* row_right = static_cast<int*>(device_.Grow(row_right_, rows * int64_t{4}));
    if (row_loss == nullptr || row_right == nullptr) return 0.0f;
    if (!device_.Launch("SoftmaxXent", SoftmaxXentKernel, rows, kThreads, rows, classes, logits,
                        labels, dlogits, row_loss, row_right)) {
      return 0.0f;
    }
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
    if (n != 0) device_.Launch("Axpy", AxpyKernel, Blocks(n), kThreads, n, alpha, x, y);
  }
  void Embedding(int rows, int dim, const int32_t* ids, const float* table, float* out,
                 bool accumulate) override {
    const int64_t n = static_cast<int64_t>(rows) * dim;
    if (n != 0) {
      device_.Launch("Embedding", EmbeddingKernel, Blocks(n), kThreads, n, dim, ids, table, out,
                     accumulate);
    }
  }
  void EmbeddingBackward(int rows, int dim, const int32_t* ids, const float* dout,
                         float* dtable) override {
    const int64_t n = static_cast<int64_t>(rows) * dim;
    if (n != 0) {
      device_.Launch("EmbeddingBackward", EmbeddingBackwardKernel, Blocks(n), kThreads, n, dim, ids,
                     dout, dtable);
    }
  }
  void LayerNorm(int rows, int dim, const float* x, const float* gamma, const float* beta, float* y,
                 float* mean, float* rstd) override {
    if (rows != 0) {
      device_.Launch("LayerNorm", LayerNormKernel, rows, kThreads, dim, x, gamma, beta, y, mean,
                     rstd);
    }
  }
  void LayerNormBackward(int rows, int dim, const float* x, const float* gamma, const float* mean,
                         const float* rstd, const float* dy, float* dx, float* dgamma,
                         float* dbeta) override {
    if (rows == 0 || !device_.Launch("LayerNormBackward", LayerNormBackwardKernel, rows, kThreads,
                                     dim, x, gamma, mean, rstd, dy, dx)) {
      return;
    }
    const int chunks = std::max(RowChunks(rows), 1);
    float* partials = Partials(2, chunks, dim);
    if (partials == nullptr) return;
    device_.Launch("LayerNormBackward", LayerNormPartialsKernel, PartialsGrid(dim, chunks),
                   PartialsBlock(), rows, dim, x, mean, rstd, dy, partials) &&
        SumPartials("LayerNormBackward", 2, chunks, dim, partials, dgamma, dbeta);
  }
  void Gelu(int64_t n, const float* x, float* y) override {
    if (n != 0) device_.Launch("Gelu", GeluKernel, Blocks(n), kThreads, n, x, y);
  }
  void GeluBackward(int64_t n, const float* x, const float* dy, float* dx) override {
    if (n != 0) {
      device_.Launch("GeluBackward", GeluBackwardKernel, Blocks(n), kThreads, n, x, dy, dx);
    }
  }

  // In 16 bits cuDNN's fused kernels where it takes the shape
  // (library_attention.cuh), else the fused kernels of attention.cuh:
  // nothing [seq, seq] is kept either way.
  void Attention(int batch, int seq, int heads, int head_dim, const float* qkv, float* lse,
                 float* out) override {
    if (!device_.ok() || batch == 0 || seq == 0 || heads == 0 || !CheckHeadDim(head_dim)) return;
    const AttentionArgs args = Args(batch, seq, heads, head_dim);
    attention_ran_ = true;
    if (library_.Forward(args, qkv, lse, out) || !device_.ok()) return;
    device_.Check(LaunchAttention(args, qkv, lse, out, device_.stream()), "Attention");
  }

  void AttentionBackward(int batch, int seq, int heads, int head_dim, const float* qkv,
                         const float* out, const float* lse, const float* dout,
                         float* dqkv) override {
    if (!device_.ok() || batch == 0 || seq == 0 || heads == 0 || !CheckHeadDim(head_dim)) return;
    const AttentionArgs args = Args(batch, seq, heads, head_dim);
    if (library_.Backward(args, qkv, out, lse, dout, dqkv) || !device_.ok()) return;
    float* delta =
        static_cast<float*>(device_.Grow(delta_, static_cast<int64_t>(batch) * heads * seq * 4));
    if (delta == nullptr) return;
    device_.Check(
        LaunchAttentionBackward(args, qkv, out, lse, dout, delta, dqkv, device_.stream()),
        "AttentionBackward");
  }

  void SetAttentionLibrary(AttentionLibrary library) override { library_.set_library(library); }
  std::string attention_path() const override {
    if (!attention_ran_) return "";
    return precision_ == Precision::kFp32 ? "own fp32 kernels" : library_.path();
  }

 private:
  using Scratch = CudaDevice::Scratch;

  // Whether the device is of compute capability 8.0 or later (Ampere), as
  // `what` needs; else false and *why.
  bool ComputeCapabilityAtLeast8(const char* what, std::string* why) {
    int major = 0, minor = 0;
    if (!device_.ComputeCapability(&major, &minor)) {
      *why = device_.error();
      return false;
    }
    if (major >= 8) return true;
    *why = "CUDA device " + std::to_string(device_.device()) + " (compute capability " +
           std::to_string(major) + ".x) cannot compute in " + what + " (needs 8.0 or later)";
    return false;
  }

  bool CheckBlas(cublasStatus_t s, const char* what) {
    if (s == CUBLAS_STATUS_SUCCESS) return true;
    device_.Fail(std::string(what) + " on device " + std::to_string(device_.device()) + ": " +
                 CublasName(s));
    return false;
  }

  bool Bf16() const { return precision_ == Precision::kBf16; }
  cudaDataType Type16() const { return Bf16() ? CUDA_R_16BF : CUDA_R_16F; }
  // x [n] rounded into out (n 16-bit values of the precision's type).
  bool To16(const float* x, int64_t n, void* out) {
    if (Bf16()) {
      return device_.Launch("rounding to 16 bits", ToBf16Kernel, Blocks(n), kThreads, n, x,
                            static_cast<__nv_bfloat16*>(out));
    }
    return device_.Launch("rounding to 16 bits", ToHalfKernel, Blocks(n), kThreads, n, x,
                          static_cast<__half*>(out));
  }
  AttentionArgs Args(int batch, int seq, int heads, int head_dim) const {
    return AttentionArgs{batch,
                         seq,
                         heads,
                         head_dim,
                         1.0f / sqrtf(static_cast<float>(head_dim)),
                         precision_ == Precision::kFp32 ? 0
                         : Bf16()                       ? 1
                                                        : 2};
  }
  bool CheckHeadDim(int head_dim) {
    if (head_dim <= kMaxHeadDim) return true;
    device_.Fail("cuda: attention takes heads of at most " + std::to_string(kMaxHeadDim) +
                 " dimensions, not " + std::to_string(head_dim));
    return false;
  }
  // Scratch for `count` terms' partial column sums over `chunks` chunks of
  // rows of `cols` columns (column_sums.cuh), or null (error() says why).
  float* Partials(int count, int chunks, int cols) {
    return static_cast<float*>(
        device_.Grow(partials_, static_cast<int64_t>(count) * chunks * cols * 4));
  }
  // The second pass of the column sums: out0 (and out1 for two terms).
  bool SumPartials(const char* what, int count, int chunks, int cols, const float* partials,
                   float* out0, float* out1) {
    return device_.Launch(what, SumPartialsKernel, (cols + kThreads - 1) / kThreads, kThreads,
                          chunks, cols, count, partials, out0, out1);
  }

  CudaDevice device_;
  LibraryAttention library_{&device_};
  cublasHandle_t blas_ = nullptr;
  Precision precision_ = Precision::kFp32;
  bool attention_ran_ = false;
  Scratch row_loss_, row_right_, gemm16_, partials_;
  Scratch delta_;  // AttentionBackward's dout . out per query
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
