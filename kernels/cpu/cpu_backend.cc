#include "kernels/cpu/cpu_backend.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/half.h"
#include "kernels/cpu/cpu_loops.h"

namespace pstrain {
namespace kernels {
namespace {

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(bool reference) : reference_(reference) {}
  const char* name() const override { return "cpu"; }

  void* Alloc(int64_t bytes) override {
    const size_t size = (static_cast<size_t>(std::max<int64_t>(bytes, 1)) + 63) / 64 * 64;
    if (limit_ > 0 && held_ + static_cast<int64_t>(size) > limit_) {
      if (error_.empty()) {
        error_ = "cpu: " + std::to_string(bytes) + " more bytes would exceed the memory budget of " +
                 std::to_string(limit_) + " (" + std::to_string(held_) + " held)";
      }
      return nullptr;
    }
    void* p = std::aligned_alloc(64, size);
    if (p == nullptr) {
      if (error_.empty()) error_ = "cpu: out of memory allocating " + std::to_string(bytes) + " bytes";
      return nullptr;
    }
    sizes_[p] = size;
    held_ += static_cast<int64_t>(size);
    peak_ = std::max(peak_, held_);
    return p;
  }
  void Free(void* p) override {
    auto it = sizes_.find(p);
    if (it == sizes_.end()) return;
    held_ -= static_cast<int64_t>(it->second);
    sizes_.erase(it);
    std::free(p);
  }
  void Upload(const void* host, int64_t bytes, void* device) override {
    if (bytes > 0) std::memcpy(device, host, static_cast<size_t>(bytes));
  }
  void Download(const void* device, int64_t bytes, void* host) override {
    if (bytes > 0) std::memcpy(host, device, static_cast<size_t>(bytes));
  }
  void DownloadAsync(const void* device, int64_t bytes, void* host) override {
    Download(device, bytes, host);
  }
  int64_t Fence() override { return ++fences_; }
  void WaitFor(int64_t) override {}
  bool Reached(int64_t) override { return true; }
  bool PinHost(void*, int64_t) override { return false; }
  void UnpinHost(void*) override {}
  std::string error() const override { return error_; }
  int64_t peak_bytes() const override { return peak_; }
  void SetMemoryLimit(int64_t bytes) override { limit_ = bytes; }

  bool SetPrecision(Precision precision, std::string* why) override {
    if (precision == Precision::kFp16 && !reference_) {
      // No fp16 arithmetic on the CPUs we build for; bf16 is emulated
      // exactly (inputs rounded, fp32 accumulation) because fp32 holds
      // every bf16 product exactly. (So it would hold fp16's, but a worker
      // gains nothing from it: only the reference backend offers it.)
      *why = "the cpu backend cannot compute in fp16 (use bf16 or fp32, or a CUDA device)";
      return false;
    }
    precision_ = precision;
    return true;
  }

  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
            const float* b, float beta, float* c) override {
    // In 16-bit precision: the products of rounded inputs, accumulated in fp32.
    a = Operand(a, static_cast<size_t>(m) * k, &round_a_);
    b = Operand(b, static_cast<size_t>(k) * n, &round_b_);
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, trans_a ? m : k, b,
                trans_b ? k : n, beta, c, n);
  }

  void AddBias(int rows, int cols, const float* bias, float* y) override {
    cpu::AddBias(rows, cols, bias, y);
  }

  void BiasGrad(int rows, int cols, const float* dy, float* db) override {
    cpu::SumRows(rows, cols, dy, db);
  }

  void ReluForward(int64_t n, const float* x, float* y) override { cpu::Relu(n, x, y); }

  void ReluBackward(int64_t n, const float* y, const float* dy, float* dx) override {
    cpu::ReluBackward(n, y, dy, dx);
  }

  float SoftmaxXent(int rows, int classes, const float* logits, const int32_t* labels,
                    float* dlogits, int* correct) override {
    double loss = 0.0;
    int right = 0;
    const float inv_rows = 1.0f / static_cast<float>(rows);
    if (dlogits == nullptr) exps_.resize(classes);
    for (int r = 0; r < rows; ++r) {
      const float* z = logits + static_cast<int64_t>(r) * classes;
      const int label = labels[r];
      const float zmax = cpu::Max(classes, z);
      // The first largest logit (std::max_element's choice).
      const int argmax = static_cast<int>(std::find(z, z + classes, zmax) - z);
      // e^(z - zmax) into the gradient's row (or scratch), then scaled.
      float* e = dlogits != nullptr ? dlogits + static_cast<int64_t>(r) * classes : exps_.data();
      const float sum = cpu::ExpSum(classes, z, zmax, e);
      loss += std::log(static_cast<double>(sum)) - static_cast<double>(z[label] - zmax);
      if (argmax == label) ++right;
      if (dlogits != nullptr) {
        // (softmax - onehot) / rows
        cpu::Scale(classes, inv_rows / sum, e);
        e[label] -= inv_rows;
      }
    }
    if (correct != nullptr) *correct = right;
    return static_cast<float>(loss / rows);
  }

  void Scale(int64_t n, float alpha, float* x) override { cpu::Scale(n, alpha, x); }

  void Axpy(int64_t n, float alpha, const float* x, float* y) override {
    cpu::Axpy(n, alpha, x, y);
  }

  void Embedding(int rows, int dim, const int32_t* ids, const float* table, float* out,
                 bool accumulate) override {
    for (int r = 0; r < rows; ++r) {
      const float* src = table + static_cast<int64_t>(ids[r]) * dim;
      float* dst = out + static_cast<int64_t>(r) * dim;
      if (accumulate) {
        for (int j = 0; j < dim; ++j) dst[j] += src[j];
      } else {
        std::copy(src, src + dim, dst);
      }
    }
  }

  void EmbeddingBackward(int rows, int dim, const int32_t* ids, const float* dout,
                         float* dtable) override {
    for (int r = 0; r < rows; ++r) {
      const float* src = dout + static_cast<int64_t>(r) * dim;
      float* dst = dtable + static_cast<int64_t>(ids[r]) * dim;
      for (int j = 0; j < dim; ++j) dst[j] += src[j];
    }
  }

  void LayerNorm(int rows, int dim, const float* x, const float* gamma, const float* beta,
                 float* y, float* mean, float* rstd) override {
    cpu::LayerNorm(rows, dim, x, gamma, beta, y, mean, rstd);
  }

  void LayerNormBackward(int rows, int dim, const float* x, const float* gamma,
                         const float* mean, const float* rstd, const float* dy, float* dx,
                         float* dgamma, float* dbeta) override {
    cpu::LayerNormBackward(rows, dim, x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
  }

  void Gelu(int64_t n, const float* x, float* y) override { cpu::Gelu(n, x, y); }

  void GeluBackward(int64_t n, const float* x, const float* dy, float* dx) override {
    cpu::GeluBackward(n, x, dy, dx);
  }

  void Attention(int batch, int seq, int heads, int head_dim, const float* qkv, float* att,
                 float* out) override {
    const int c = heads * head_dim, w3 = 3 * c;
    const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    qkv = Operand(qkv, static_cast<size_t>(batch) * seq * w3, &round_a_);
    for (int b = 0; b < batch; ++b) {
      for (int h = 0; h < heads; ++h) {
        const float* q = qkv + static_cast<int64_t>(b) * seq * w3 + h * head_dim;
        const float* k = q + c;
        const float* v = q + 2 * c;
        float* a = att + (static_cast<int64_t>(b) * heads + h) * seq * seq;
        // a = scale * q k^T, then a causal softmax per row.
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, seq, seq, head_dim, scale, q, w3, k,
                    w3, 0.0f, a, seq);
        for (int t = 0; t < seq; ++t) {
          float* row = a + static_cast<int64_t>(t) * seq;
          const float sum = cpu::ExpSum(t + 1, row, cpu::Max(t + 1, row), row);
          cpu::Scale(t + 1, 1.0f / sum, row);
          std::fill(row + t + 1, row + seq, 0.0f);
        }
        float* o = out + static_cast<int64_t>(b) * seq * c + h * head_dim;
        const float* a_in = Operand(a, static_cast<size_t>(seq) * seq, &round_b_);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, seq, head_dim, seq, 1.0f, a_in,
                    seq, v, w3, 0.0f, o, c);
      }
    }
  }

  void AttentionBackward(int batch, int seq, int heads, int head_dim, const float* qkv,
                         const float* att, const float* dout, float* dqkv) override {
    const int c = heads * head_dim, w3 = 3 * c;
    const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    std::vector<float> ds(static_cast<size_t>(seq) * seq), rounded_qkv, rounded_dout;
    qkv = Operand(qkv, static_cast<size_t>(batch) * seq * w3, &rounded_qkv);
    dout = Operand(dout, static_cast<size_t>(batch) * seq * c, &rounded_dout);
    for (int b = 0; b < batch; ++b) {
      for (int h = 0; h < heads; ++h) {
        const int64_t base = static_cast<int64_t>(b) * seq * w3 + h * head_dim;
        const float* q = qkv + base;
        const float* k = q + c;
        const float* v = q + 2 * c;
        float* dq = dqkv + base;
        float* dk = dq + c;
        float* dv = dq + 2 * c;
        const float* a = att + (static_cast<int64_t>(b) * heads + h) * seq * seq;
        const float* d_o = dout + static_cast<int64_t>(b) * seq * c + h * head_dim;
        // dv = a^T do; da = do v^T
        const float* a_in = Operand(a, static_cast<size_t>(seq) * seq, &round_a_);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, seq, head_dim, seq, 1.0f, a_in, seq,
                    d_o, c, 0.0f, dv, w3);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, seq, seq, head_dim, 1.0f, d_o, c, v,
                    w3, 0.0f, ds.data(), seq);
        // Through the softmax: ds = a * (da - sum_j a da), zero above the diagonal.
        for (int t = 0; t < seq; ++t) {
          float* dr = ds.data() + static_cast<int64_t>(t) * seq;
          cpu::SoftmaxBackward(t + 1, a + static_cast<int64_t>(t) * seq, dr);
          std::fill(dr + t + 1, dr + seq, 0.0f);
        }
        // dq = scale * ds k; dk = scale * ds^T q
        const float* ds_in = Operand(ds.data(), ds.size(), &round_b_);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, seq, head_dim, seq, scale, ds_in,
                    seq, k, w3, 0.0f, dq, w3);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, seq, head_dim, seq, scale, ds_in,
                    seq, q, w3, 0.0f, dk, w3);
      }
    }
  }

 private:
  // x [n] as a matrix product's input: itself in fp32, else rounded to the
  // precision's 16 bits (and back: fp32 holds every product of two exactly).
  const float* Operand(const float* x, size_t n, std::vector<float>* rounded) const {
    if (precision_ == Precision::kFp32) return x;
    rounded->resize(n);
    for (size_t i = 0; i < n; ++i) {
      (*rounded)[i] = precision_ == Precision::kBf16 ? Bf16ToFloat(FloatToBf16(x[i]))
                                                     : HalfToFloat(FloatToHalf(x[i]));
    }
    return rounded->data();
  }

  const bool reference_;
  Precision precision_ = Precision::kFp32;
  std::vector<float> round_a_, round_b_;
  std::vector<float> exps_;  // SoftmaxXent's row without a gradient to write
  int64_t fences_ = 0;
  std::unordered_map<void*, size_t> sizes_;
  int64_t held_ = 0, peak_ = 0, limit_ = 0;
  std::string error_;
};

}  // namespace

std::unique_ptr<Backend> MakeCpuBackend(int threads) {
  if (threads > 0) openblas_set_num_threads(threads);
  return std::make_unique<CpuBackend>(/*reference=*/false);
}

std::unique_ptr<Backend> MakeCpuReferenceBackend() {
  return std::make_unique<CpuBackend>(/*reference=*/true);
}

}  // namespace kernels
}  // namespace pstrain
