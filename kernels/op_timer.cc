#include "kernels/op_timer.h"

namespace pstrain {
namespace kernels {

template <typename Op>
void OpTimer::Time(const char* name, Op op) {
  if (!on_) {
    op();
    return;
  }
  const Clock::time_point t0 = Clock::now();
  op();
  inner_->WaitFor(inner_->Fence());
  OpTime& t = times_[name];
  ++t.calls;
  t.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
}

void OpTimer::Upload(const void* host, int64_t bytes, void* device) {
  Time("upload", [&] { inner_->Upload(host, bytes, device); });
}

void OpTimer::Download(const void* device, int64_t bytes, void* host) {
  Time("download", [&] { inner_->Download(device, bytes, host); });
}

void OpTimer::DownloadAsync(const void* device, int64_t bytes, void* host) {
  Time("download", [&] { inner_->DownloadAsync(device, bytes, host); });
}

void OpTimer::Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                   const float* b, float beta, float* c) {
  Time("gemm", [&] { inner_->Gemm(trans_a, trans_b, m, n, k, alpha, a, b, beta, c); });
}

void OpTimer::AddBias(int rows, int cols, const float* bias, float* y) {
  Time("add_bias", [&] { inner_->AddBias(rows, cols, bias, y); });
}

void OpTimer::BiasGrad(int rows, int cols, const float* dy, float* db) {
  Time("bias_grad", [&] { inner_->BiasGrad(rows, cols, dy, db); });
}

void OpTimer::ReluForward(int64_t n, const float* x, float* y) {
  Time("relu", [&] { inner_->ReluForward(n, x, y); });
}

void OpTimer::ReluBackward(int64_t n, const float* y, const float* dy, float* dx) {
  Time("relu_backward", [&] { inner_->ReluBackward(n, y, dy, dx); });
}

float OpTimer::SoftmaxXent(int rows, int classes, const float* logits, const int32_t* labels,
                           float* dlogits, int* correct) {
  float loss = 0;
  Time("softmax_xent",
       [&] { loss = inner_->SoftmaxXent(rows, classes, logits, labels, dlogits, correct); });
  return loss;
}

void OpTimer::Scale(int64_t n, float alpha, float* x) {
  Time("scale", [&] { inner_->Scale(n, alpha, x); });
}

void OpTimer::Axpy(int64_t n, float alpha, const float* x, float* y) {
  Time("axpy", [&] { inner_->Axpy(n, alpha, x, y); });
}

void OpTimer::Embedding(int rows, int dim, const int32_t* ids, const float* table, float* out,
                        bool accumulate) {
  Time("embedding", [&] { inner_->Embedding(rows, dim, ids, table, out, accumulate); });
}

void OpTimer::EmbeddingBackward(int rows, int dim, const int32_t* ids, const float* dout,
                                float* dtable) {
  Time("embedding_backward", [&] { inner_->EmbeddingBackward(rows, dim, ids, dout, dtable); });
}

void OpTimer::LayerNorm(int rows, int dim, const float* x, const float* gamma, const float* beta,
                        float* y, float* mean, float* rstd) {
  Time("layer_norm", [&] { inner_->LayerNorm(rows, dim, x, gamma, beta, y, mean, rstd); });
}

void OpTimer::LayerNormBackward(int rows, int dim, const float* x, const float* gamma,
                                const float* mean, const float* rstd, const float* dy, float* dx,
                                float* dgamma, float* dbeta) {
  Time("layer_norm_backward",
       [&] { inner_->LayerNormBackward(rows, dim, x, gamma, mean, rstd, dy, dx, dgamma, dbeta); });
}

void OpTimer::Gelu(int64_t n, const float* x, float* y) {
  Time("gelu", [&] { inner_->Gelu(n, x, y); });
}

void OpTimer::GeluBackward(int64_t n, const float* x, const float* dy, float* dx) {
  Time("gelu_backward", [&] { inner_->GeluBackward(n, x, dy, dx); });
}

void OpTimer::Attention(int batch, int seq, int heads, int head_dim, const float* qkv, float* lse,
                        float* out) {
  Time("attention", [&] { inner_->Attention(batch, seq, heads, head_dim, qkv, lse, out); });
}

void OpTimer::AttentionBackward(int batch, int seq, int heads, int head_dim, const float* qkv,
                                const float* out, const float* lse, const float* dout,
                                float* dqkv) {
  Time("attention_backward",
       [&] { inner_->AttentionBackward(batch, seq, heads, head_dim, qkv, out, lse, dout, dqkv); });
}

}  // namespace kernels
}  // namespace pstrain
