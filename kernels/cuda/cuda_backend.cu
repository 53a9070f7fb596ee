// The CUDA backend's op dispatch (see cuda_backend.h): the Backend
// interface over a CudaDevice (memory, streams, fences and the sticky error;
// device.cuh), cuBLAS for the matrix products, and the kernels of
// elementwise.cuh, column_sums.cuh, layernorm.cuh, softmax_xent.cuh and
// attention.cuh. Every op is queued on the device's one computation
// stream; Download and SoftmaxXent wait for it. CUDA and cuBLAS errors are
// kept as the first error (error()) and later calls do nothing.
#include "kernels/cuda/cuda_backend.h"

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
#include "kernels/cuda/device.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/layernorm.cuh"
#include "kernels/cuda/softmax_xent.cuh"

namespace pstrain {
namespace kernels {
namespace {

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
    if (precision == Precision::kBf16) {
      int major = 0;
      if (!device_.Check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                                                device_.device()),
                         "cudaDeviceGetAttribute")) {
        *why = device_.error();
        return false;
      }
      if (major < 8) {
        *why = "CUDA device " + std::to_string(device_.device()) + " (compute capability " +
               std::to_string(major) + ".x) cannot compute in bf16 (needs 8.0 or later)";
        return false;
      }
    }
    precision_ = precision;
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
      device_.Launch("EmbeddingBackward", EmbeddingBackwardKernel, Blocks(n), kThreads, n, dim,
                     ids, dout, dtable);
    }
  }
  void LayerNorm(int rows, int dim, const float* x, const float* gamma, const float* beta,
                 float* y, float* mean, float* rstd) override {
    if (rows != 0) {
      device_.Launch("LayerNorm", LayerNormKernel, rows, kThreads, dim, x, gamma, beta, y, mean,
                     rstd);
    }
  }
  void LayerNormBackward(int rows, int dim, const float* x, const float* gamma,
                         const float* mean, const float* rstd, const float* dy, float* dx,
                         float* dgamma, float* dbeta) override {
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

  // The heads of every sequence side by side (SplitHeads), then one
  // strided-batched product over all (sequence, head) pairs per step. In
  // 16-bit precision the products take q, k, v and the attention weights
  // rounded to 16 bits (the softmax itself stays fp32).
  void Attention(int batch, int seq, int heads, int head_dim, const float* qkv, float* att,
                 float* out) override {
    if (!device_.ok() || batch == 0) return;
    const int pairs = batch * heads;
    const int64_t tt = static_cast<int64_t>(seq) * seq, per = static_cast<int64_t>(seq) * head_dim;
    const float scale = 1.0f / sqrtf(static_cast<float>(head_dim));
    const bool half = precision_ != Precision::kFp32;
    const HeadLayout three{seq, heads, head_dim, 3, 3 * pairs * per};
    const HeadLayout one{seq, heads, head_dim, 1, pairs * per};
    const char* q = SplitHeads(three, qkv, qkv_heads_);
    float* o = static_cast<float*>(device_.Grow(o_heads_, one.n * 4));
    char* a16 = half ? static_cast<char*>(device_.Grow(att16_, pairs * tt * 2)) : nullptr;
    if (q == nullptr || o == nullptr || (half && a16 == nullptr)) return;
    const char* k = q + Bytes(pairs * per);
    const char* v = q + Bytes(2 * pairs * per);
    // a = scale * q k^T; softmax; o = a v
    if (!Batched(CUBLAS_OP_T, CUBLAS_OP_N, seq, seq, head_dim, scale, k, head_dim, per, q,
                 head_dim, per, att, seq, tt, pairs, "scores") ||
        !device_.Launch("Attention", CausalSoftmaxKernel, pairs * seq, kThreads, seq, att,
                        static_cast<void*>(a16), Bf16()) ||
        !Batched(CUBLAS_OP_N, CUBLAS_OP_N, head_dim, seq, seq, 1.0f, v, head_dim, per,
                 half ? a16 : reinterpret_cast<const char*>(att), seq, tt, o, head_dim, per, pairs,
                 "values")) {
      return;
    }
    device_.Launch("Attention", MergeHeadsKernel, Blocks(one.n), kThreads, one, o, out);
  }

  void AttentionBackward(int batch, int seq, int heads, int head_dim, const float* qkv,
                         const float* att, const float* dout, float* dqkv) override {
    if (!device_.ok() || batch == 0) return;
    const int pairs = batch * heads;
    const int64_t tt = static_cast<int64_t>(seq) * seq, per = static_cast<int64_t>(seq) * head_dim;
    const float scale = 1.0f / sqrtf(static_cast<float>(head_dim));
    const bool half = precision_ != Precision::kFp32;
    const HeadLayout three{seq, heads, head_dim, 3, 3 * pairs * per};
    const HeadLayout one{seq, heads, head_dim, 1, pairs * per};
    const char* q = SplitHeads(three, qkv, qkv_heads_);
    const char* d_o = SplitHeads(one, dout, dout_heads_);
    float* dq = static_cast<float*>(device_.Grow(dqkv_heads_, three.n * 4));
    float* ds = static_cast<float*>(device_.Grow(scores_, pairs * tt * 4));
    char* a16 = half ? static_cast<char*>(device_.Grow(att16_, pairs * tt * 2)) : nullptr;
    char* ds16 = half ? static_cast<char*>(device_.Grow(ds16_, pairs * tt * 2)) : nullptr;
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
    const char* ds_in = half ? ds16 : reinterpret_cast<const char*>(ds);
    // dv = a^T do; ds = do v^T; through the softmax; dq = scale * ds k;
    // dk = scale * ds^T q
    if (!Batched(CUBLAS_OP_N, CUBLAS_OP_T, head_dim, seq, seq, 1.0f, d_o, head_dim, per, a_in,
                 seq, tt, dv, head_dim, per, pairs, "dv") ||
        !Batched(CUBLAS_OP_T, CUBLAS_OP_N, seq, seq, head_dim, 1.0f, v, head_dim, per, d_o,
                 head_dim, per, ds, seq, tt, pairs, "dscores") ||
        !device_.Launch("AttentionBackward", CausalSoftmaxBackwardKernel, pairs * seq, kThreads,
                        seq, att, ds, static_cast<void*>(ds16),
                        Bf16()) ||
        !Batched(CUBLAS_OP_N, CUBLAS_OP_N, head_dim, seq, seq, scale, k, head_dim, per, ds_in,
                 seq, tt, dq, head_dim, per, pairs, "dq") ||
        !Batched(CUBLAS_OP_N, CUBLAS_OP_T, head_dim, seq, seq, scale, q, head_dim, per, ds_in,
                 seq, tt, dk, head_dim, per, pairs, "dk")) {
      return;
    }
    device_.Launch("AttentionBackward", MergeHeadsKernel, Blocks(three.n), kThreads, three, dq,
                   dqkv);
  }

 private:
  using Scratch = CudaDevice::Scratch;

  bool CheckBlas(cublasStatus_t s, const char* what) {
    if (s == CUBLAS_STATUS_SUCCESS) return true;
    device_.Fail(std::string(what) + " on device " + std::to_string(device_.device()) + ": " +
                 CublasName(s));
    return false;
  }

  bool Bf16() const { return precision_ == Precision::kBf16; }
  cudaDataType Type16() const { return Bf16() ? CUDA_R_16BF : CUDA_R_16F; }
  // Bytes of n elements of the products' input type.
  int64_t Bytes(int64_t n) const { return n * (precision_ == Precision::kFp32 ? 4 : 2); }
  // x [n] rounded into out (n 16-bit values of the precision's type).
  bool To16(const float* x, int64_t n, void* out) {
    if (Bf16()) {
      return device_.Launch("rounding to 16 bits", ToBf16Kernel, Blocks(n), kThreads, n, x,
                            static_cast<__nv_bfloat16*>(out));
    }
    return device_.Launch("rounding to 16 bits", ToHalfKernel, Blocks(n), kThreads, n, x,
                          static_cast<__half*>(out));
  }
  // x in the heads' layout `l`, in the products' input type, in `scratch`.
  const char* SplitHeads(const HeadLayout& l, const float* x, Scratch& scratch) {
    void* out = device_.Grow(scratch, Bytes(l.n));
    if (out == nullptr) return nullptr;
    bool queued = false;
    if (precision_ == Precision::kFp32) {
      queued = device_.Launch("SplitHeads", SplitHeadsKernel, Blocks(l.n), kThreads, l, x,
                              static_cast<float*>(out));
    } else if (Bf16()) {
      queued = device_.Launch("SplitHeads", SplitHeadsBf16Kernel, Blocks(l.n), kThreads, l, x,
                              static_cast<__nv_bfloat16*>(out));
    } else {
      queued = device_.Launch("SplitHeads", SplitHeadsHalfKernel, Blocks(l.n), kThreads, l, x,
                              static_cast<__half*>(out));
    }
    return queued ? static_cast<const char*>(out) : nullptr;
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
  cublasHandle_t blas_ = nullptr;
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
