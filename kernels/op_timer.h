// A Backend that runs every op on another one and, while on, adds up the
// wall time and the calls of each op by name: where a step's time goes
// (bench/worker_bench --per_op). On a device that queues work (CUDA) each
// timed op is waited for, which serialises the step; off, it only
// forwards.
#ifndef PSTRAIN_KERNELS_OP_TIMER_H_
#define PSTRAIN_KERNELS_OP_TIMER_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

#include "kernels/backend.h"

namespace pstrain {
namespace kernels {

struct OpTime {
  int64_t calls = 0;
  double seconds = 0;
};

class OpTimer : public Backend {
 public:
  // `inner` must outlive the timer.
  explicit OpTimer(Backend* inner) : inner_(inner) {}

  void set_on(bool on) { on_ = on; }
  // The times so far, by op name ("gemm", "attention", ...).
  const std::map<std::string, OpTime>& times() const { return times_; }
  void Reset() { times_.clear(); }

  const char* name() const override { return inner_->name(); }
  void* Alloc(int64_t bytes) override { return inner_->Alloc(bytes); }
  void Free(void* device) override { inner_->Free(device); }
  void Upload(const void* host, int64_t bytes, void* device) override;
  void Download(const void* device, int64_t bytes, void* host) override;
  void DownloadAsync(const void* device, int64_t bytes, void* host) override;
  int64_t Fence() override { return inner_->Fence(); }
  void WaitFor(int64_t fence) override { inner_->WaitFor(fence); }
  bool Reached(int64_t fence) override { return inner_->Reached(fence); }
  bool PinHost(void* host, int64_t bytes) override { return inner_->PinHost(host, bytes); }
  void UnpinHost(void* host) override { inner_->UnpinHost(host); }
  std::string error() const override { return inner_->error(); }
  int64_t peak_bytes() const override { return inner_->peak_bytes(); }
  void SetMemoryLimit(int64_t bytes) override { inner_->SetMemoryLimit(bytes); }
  bool AllowTf32(bool allow, std::string* why) override { return inner_->AllowTf32(allow, why); }
  void SetAttentionLibrary(AttentionLibrary library) override {
    inner_->SetAttentionLibrary(library);
  }
  std::string attention_path() const override { return inner_->attention_path(); }
  bool SetPrecision(Precision precision, std::string* why) override {
    return inner_->SetPrecision(precision, why);
  }

  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
            const float* b, float beta, float* c) override;
  void AddBias(int rows, int cols, const float* bias, float* y) override;
  void BiasGrad(int rows, int cols, const float* dy, float* db) override;
  void ReluForward(int64_t n, const float* x, float* y) override;
  void ReluBackward(int64_t n, const float* y, const float* dy, float* dx) override;
  float SoftmaxXent(int rows, int classes, const float* logits, const int32_t* labels,
                    float* dlogits, int* correct) override;
  void Scale(int64_t n, float alpha, float* x) override;
  void Axpy(int64_t n, float alpha, const float* x, float* y) override;
  void Embedding(int rows, int dim, const int32_t* ids, const float* table, float* out,
                 bool accumulate) override;
  void EmbeddingBackward(int rows, int dim, const int32_t* ids, const float* dout,
                         float* dtable) override;
  void LayerNorm(int rows, int dim, const float* x, const float* gamma, const float* beta, float* y,
                 float* mean, float* rstd) override;
  void LayerNormBackward(int rows, int dim, const float* x, const float* gamma, const float* mean,
                         const float* rstd, const float* dy, float* dx, float* dgamma,
                         float* dbeta) override;
  void Gelu(int64_t n, const float* x, float* y) override;
  void GeluBackward(int64_t n, const float* x, const float* dy, float* dx) override;
  void Attention(int batch, int seq, int heads, int head_dim, const float* qkv, float* lse,
                 float* out) override;
  void AttentionBackward(int batch, int seq, int heads, int head_dim, const float* qkv,
                         const float* out, const float* lse, const float* dout,
                         float* dqkv) override;

 private:
  using Clock = std::chrono::steady_clock;
  // Runs `op` on the inner backend, timed under `name` while on.
  template <typename Op>
  void Time(const char* name, Op op);

  Backend* const inner_;
  bool on_ = false;
  std::map<std::string, OpTime> times_;
};

}  // namespace kernels
}  // namespace pstrain

#endif  // PSTRAIN_KERNELS_OP_TIMER_H_
