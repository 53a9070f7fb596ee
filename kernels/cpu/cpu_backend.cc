#include "kernels/cpu/cpu_backend.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/functional/function_ref.h"
#include "common/thread_pool.h"
#include "kernels/cpu/cpu_attention.h"
#include "kernels/cpu/cpu_loops.h"

namespace pstrain {
namespace kernels {
namespace {

// Element-wise work below this many elements a thread runs on the caller.
constexpr int64_t kGrain = 16384;
// How long the pool's threads yield between a step's parts before they
// sleep: a wake-up cost more than a small op (the MLP's step on 2 threads
// ran at 40-55 thousand samples/s with none, 67-81 thousand with this).
constexpr absl::Duration kSpin = absl::Microseconds(100);

// Scratch of the thread running a row of SoftmaxXent: each part needs its
// own.
std::vector<float>& RowScratch() {
  thread_local std::vector<float> scratch;
  return scratch;
}

class CpuBackend : public Backend {
 public:
  // `threads` > 1: the matrix products, element-wise ops, rows and
  // attention heads split over that many threads.
  CpuBackend(bool reference, int threads)
      : reference_(reference),
        pool_(threads > 1 ? std::make_unique<ThreadPool>(threads, kSpin) : nullptr) {}
  const char* name() const override { return "cpu"; }

  void* Alloc(int64_t bytes) override {
    const size_t size = (static_cast<size_t>(std::max<int64_t>(bytes, 1)) + 63) / 64 * 64;
    if (limit_ > 0 && held_ + static_cast<int64_t>(size) > limit_) {
      if (error_.empty()) {
        error_ = "cpu: " + std::to_string(bytes) +
                 " more bytes would exceed the memory budget of " + std::to_string(limit_) + " (" +
                 std::to_string(held_) + " held)";
      }
      return nullptr;
    }
    void* p = std::aligned_alloc(64, size);
    if (p == nullptr) {
      if (error_.empty())
        error_ = "cpu: out of memory allocating " + std::to_string(bytes) + " bytes";
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

  std::string attention_path() const override {
    return attention_ran_ ? "own kernels (cpu)" : "";
  }
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
    const CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
    const CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
    const int lda = trans_a ? m : k, ldb = trans_b ? k : n;
    // The rows of c (or its columns, when it is wider than tall) over the
    // threads, a quarter million multiply-adds a part at least; OpenBLAS
    // runs each part on its caller's thread (see MakeCpuBackend). A part's
    // products may round in another order than the whole's (OpenBLAS tiles
    // each call its own way): the last bits depend on the threads.
    const bool by_rows = m >= n;
    const int64_t work = static_cast<int64_t>(k) * (by_rows ? n : m);
    const int64_t grain = (int64_t{1} << 18) / std::max<int64_t>(work, 1) + 1;
    Split(by_rows ? m : n, grain, [&](int64_t begin, int64_t end) {
      const int part = static_cast<int>(end - begin);
      if (by_rows) {
        cblas_sgemm(CblasRowMajor, ta, tb, part, n, k, alpha, trans_a ? a + begin : a + begin * lda,
                    lda, b, ldb, beta, c + begin * n, n);
      } else {
        cblas_sgemm(CblasRowMajor, ta, tb, m, part, k, alpha, a, lda,
                    trans_b ? b + begin * ldb : b + begin, ldb, beta, c + begin, n);
      }
    });
  }

  void AddBias(int rows, int cols, const float* bias, float* y) override {
    Split(rows, kGrain / std::max(cols, 1) + 1, [&](int64_t begin, int64_t end) {
      cpu::AddBias(static_cast<int>(end - begin), cols, bias, y + begin * cols);
    });
  }

  // Split by columns: each column's sum keeps the row order.
  void BiasGrad(int rows, int cols, const float* dy, float* db) override {
    Split(cols, kGrain / std::max(rows, 1) + 64, [&](int64_t begin, int64_t end) {
      cpu::SumRows(rows, static_cast<int>(end - begin), cols, dy + begin, db + begin);
    });
  }

  void ReluForward(int64_t n, const float* x, float* y) override {
    Split(n, kGrain, [&](int64_t b, int64_t e) { cpu::Relu(e - b, x + b, y + b); });
  }

  void ReluBackward(int64_t n, const float* y, const float* dy, float* dx) override {
    Split(n, kGrain,
          [&](int64_t b, int64_t e) { cpu::ReluBackward(e - b, y + b, dy + b, dx + b); });
  }

  float SoftmaxXent(int rows, int classes, const float* logits, const int32_t* labels,
                    float* dlogits, int* correct) override {
    row_loss_.resize(rows);
    row_right_.resize(rows);
    Split(rows, kGrain / std::max(classes, 1) + 1, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        SoftmaxXentRow(rows, classes, logits + r * classes, labels[r],
                       dlogits != nullptr ? dlogits + r * classes : nullptr, &row_loss_[r],
                       &row_right_[r]);
      }
    });
    double loss = 0.0;  // added up in row order, however the rows were split
    int right = 0;
    for (int r = 0; r < rows; ++r) {
      loss += row_loss_[r];
      right += row_right_[r];
    }
    if (correct != nullptr) *correct = right;
    return static_cast<float>(loss / rows);
  }

  void Scale(int64_t n, float alpha, float* x) override {
    Split(n, kGrain, [&](int64_t b, int64_t e) { cpu::Scale(e - b, alpha, x + b); });
  }

  void Axpy(int64_t n, float alpha, const float* x, float* y) override {
    Split(n, kGrain, [&](int64_t b, int64_t e) { cpu::Axpy(e - b, alpha, x + b, y + b); });
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

  void LayerNorm(int rows, int dim, const float* x, const float* gamma, const float* beta, float* y,
                 float* mean, float* rstd) override {
    Split(rows, kGrain / std::max(dim, 1) + 1, [&](int64_t begin, int64_t end) {
      const int64_t at = begin * dim;
      cpu::LayerNorm(static_cast<int>(end - begin), dim, x + at, gamma, beta, y + at, mean + begin,
                     rstd + begin);
    });
  }

  void LayerNormBackward(int rows, int dim, const float* x, const float* gamma, const float* mean,
                         const float* rstd, const float* dy, float* dx, float* dgamma,
                         float* dbeta) override {
    Split(rows, kGrain / std::max(dim, 1) + 1, [&](int64_t begin, int64_t end) {
      const int64_t at = begin * dim;
      cpu::LayerNormBackwardRows(static_cast<int>(end - begin), dim, x + at, gamma, mean + begin,
                                 rstd + begin, dy + at, dx + at);
    });
    Split(dim, kGrain / std::max(rows, 1) + 64, [&](int64_t begin, int64_t end) {
      cpu::LayerNormParamGrads(rows, dim, static_cast<int>(begin), static_cast<int>(end), x, mean,
                               rstd, dy, dgamma, dbeta);
    });
  }

  void Gelu(int64_t n, const float* x, float* y) override {
    Split(n, kGrain, [&](int64_t b, int64_t e) { cpu::Gelu(e - b, x + b, y + b); });
  }

  void GeluBackward(int64_t n, const float* x, const float* dy, float* dx) override {
    Split(n, kGrain,
          [&](int64_t b, int64_t e) { cpu::GeluBackward(e - b, x + b, dy + b, dx + b); });
  }

  // The (sequence, head) pairs split over threads, each whole on one
  // (cpu_attention.h): no bit depends on the threads.
  void Attention(int batch, int seq, int heads, int head_dim, const float* qkv, float* lse,
                 float* out) override {
    const cpu::AttentionShape shape{batch, seq, heads, head_dim};
    attention_ran_ = true;
    qkv = Operand(qkv, static_cast<size_t>(batch) * seq * 3 * heads * head_dim, &round_a_);
    Split(static_cast<int64_t>(batch) * heads, 1, [&](int64_t begin, int64_t end) {
      for (int64_t bh = begin; bh < end; ++bh) {
        cpu::AttentionHead(shape, precision_, qkv, bh / heads, bh % heads, lse, out);
      }
    });
  }

  void AttentionBackward(int batch, int seq, int heads, int head_dim, const float* qkv,
                         const float* out, const float* lse, const float* dout,
                         float* dqkv) override {
    const cpu::AttentionShape shape{batch, seq, heads, head_dim};
    const size_t rows = static_cast<size_t>(batch) * seq, c = heads * head_dim;
    qkv = Operand(qkv, rows * 3 * c, &round_a_);
    dout = Operand(dout, rows * c, &round_b_);
    Split(static_cast<int64_t>(batch) * heads, 1, [&](int64_t begin, int64_t end) {
      for (int64_t bh = begin; bh < end; ++bh) {
        cpu::AttentionBackwardHead(shape, precision_, qkv, out, lse, dout, bh / heads, bh % heads,
                                   dqkv);
      }
    });
  }

 private:
  // fn over [0, n) in parts of at least `grain` on the pool's threads, or
  // whole on this one.
  void Split(int64_t n, int64_t grain, absl::FunctionRef<void(int64_t, int64_t)> fn) {
    if (pool_ != nullptr) {
      pool_->ParallelFor(n, grain, fn);
    } else if (n > 0) {
      fn(0, n);
    }
  }

  // One row of SoftmaxXent: its loss, whether its arg-max is the label,
  // and (if d is not null) its gradient.
  static void SoftmaxXentRow(int rows, int classes, const float* z, int label, float* d,
                             double* loss, int* right) {
    const float zmax = cpu::Max(classes, z);
    // The first largest logit (std::max_element's choice).
    *right = std::find(z, z + classes, zmax) - z == label;
    // e^(z - zmax) into the gradient's row (or scratch), then scaled.
    float* e = d;
    if (e == nullptr) {
      RowScratch().resize(classes);
      e = RowScratch().data();
    }
    const float sum = cpu::ExpSum(classes, z, zmax, e);
    *loss = std::log(static_cast<double>(sum)) - static_cast<double>(z[label] - zmax);
    if (d != nullptr) {
      const float inv_rows = 1.0f / static_cast<float>(rows);
      cpu::Scale(classes, inv_rows / sum, d);  // (softmax - onehot) / rows
      d[label] -= inv_rows;
    }
  }

  // x [n] as a matrix product's input: itself in fp32, else rounded to the
  // precision's 16 bits (and back: fp32 holds every product of two exactly).
  const float* Operand(const float* x, size_t n, std::vector<float>* rounded) const {
    if (precision_ == Precision::kFp32) return x;
    rounded->resize(n);
    cpu::RoundTo(precision_, static_cast<int64_t>(n), x, rounded->data());
    return rounded->data();
  }

  const bool reference_;
  Precision precision_ = Precision::kFp32;
  bool attention_ran_ = false;
  std::vector<float> round_a_, round_b_;
  std::vector<double> row_loss_;  // SoftmaxXent's, a row each
  std::vector<int> row_right_;
  std::unique_ptr<ThreadPool> pool_;  // null: one thread
  int64_t fences_ = 0;
  std::unordered_map<void*, size_t> sizes_;
  int64_t held_ = 0, peak_ = 0, limit_ = 0;
  std::string error_;
};

}  // namespace

std::unique_ptr<Backend> MakeCpuBackend(int threads) {
  // With threads of its own the backend splits the products itself: OpenBLAS's
  // threads spin for a while after each product, and on a machine with as
  // many cores as threads they took the cores the element-wise parts needed.
  if (threads > 0) openblas_set_num_threads(1);
  return std::make_unique<CpuBackend>(/*reference=*/false, threads);
}

std::unique_ptr<Backend> MakeCpuReferenceBackend() {
  return std::make_unique<CpuBackend>(/*reference=*/true, /*threads=*/1);
}

}  // namespace kernels
}  // namespace pstrain
