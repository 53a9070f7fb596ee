#include "kernels/cpu/cpu_backend.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>

namespace pstrain {
namespace kernels {
namespace {

class CpuBackend : public Backend {
 public:
  const char* name() const override { return "cpu"; }

  void* Alloc(int64_t bytes) override {
    const size_t size = (static_cast<size_t>(std::max<int64_t>(bytes, 1)) + 63) / 64 * 64;
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
  std::string error() const override { return error_; }
  int64_t peak_bytes() const override { return peak_; }

  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
            const float* b, float beta, float* c) override {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, trans_a ? m : k, b,
                trans_b ? k : n, beta, c, n);
  }

  void AddBias(int rows, int cols, const float* bias, float* y) override {
    for (int r = 0; r < rows; ++r) {
      float* row = y + static_cast<int64_t>(r) * cols;
      for (int j = 0; j < cols; ++j) row[j] += bias[j];
    }
  }

  void BiasGrad(int rows, int cols, const float* dy, float* db) override {
    std::fill(db, db + cols, 0.0f);
    for (int r = 0; r < rows; ++r) {
      const float* row = dy + static_cast<int64_t>(r) * cols;
      for (int j = 0; j < cols; ++j) db[j] += row[j];
    }
  }

  void ReluForward(int64_t n, const float* x, float* y) override {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
  }

  void ReluBackward(int64_t n, const float* y, const float* dy, float* dx) override {
    for (int64_t i = 0; i < n; ++i) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
  }

  float SoftmaxXent(int rows, int classes, const float* logits, const int32_t* labels,
                    float* dlogits, int* correct) override {
    double loss = 0.0;
    int right = 0;
    const float inv_rows = 1.0f / static_cast<float>(rows);
    for (int r = 0; r < rows; ++r) {
      const float* z = logits + static_cast<int64_t>(r) * classes;
      const int label = labels[r];
      const int argmax = static_cast<int>(std::max_element(z, z + classes) - z);
      const float zmax = z[argmax];
      double sum = 0.0;
      for (int j = 0; j < classes; ++j) sum += std::exp(static_cast<double>(z[j] - zmax));
      const double log_sum = std::log(sum);
      loss += log_sum - static_cast<double>(z[label] - zmax);
      if (argmax == label) ++right;
      if (dlogits != nullptr) {
        float* d = dlogits + static_cast<int64_t>(r) * classes;
        for (int j = 0; j < classes; ++j) {
          const float p = static_cast<float>(std::exp(static_cast<double>(z[j] - zmax) - log_sum));
          d[j] = (p - (j == label ? 1.0f : 0.0f)) * inv_rows;
        }
      }
    }
    if (correct != nullptr) *correct = right;
    return static_cast<float>(loss / rows);
  }

 private:
  std::unordered_map<void*, size_t> sizes_;
  int64_t held_ = 0, peak_ = 0;
  std::string error_;
};

}  // namespace

std::unique_ptr<Backend> MakeCpuBackend(int threads) {
  if (threads > 0) openblas_set_num_threads(threads);
  return std::make_unique<CpuBackend>();
}

}  // namespace kernels
}  // namespace pstrain
