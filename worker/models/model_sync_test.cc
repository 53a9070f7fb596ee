// How a model's step meets the device's asynchrony, on a recording backend
// (the CPU backend underneath, every call logged): a step on the device
// alone still ends when the device is done, and gradients are reported
// once each, last layer first, as soon as the device says they landed.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "worker/models/gpt_model.h"

namespace pstrain {
namespace {

// The CPU backend, logging each call; Reached() answers `reached`.
class RecordingBackend : public kernels::Backend {
 public:
  std::vector<std::string> calls;
  bool reached = true;
  int64_t last_fence = 0, last_wait = 0;

  const char* name() const override { return "recording"; }
  void* Alloc(int64_t b) override { return cpu_->Alloc(b); }
  void Free(void* p) override { cpu_->Free(p); }
  void Upload(const void* h, int64_t b, void* d) override {
    Log("Upload");
    cpu_->Upload(h, b, d);
  }
  void Download(const void* d, int64_t b, void* h) override {
    Log("Download");
    cpu_->Download(d, b, h);
  }
  void DownloadAsync(const void* d, int64_t b, void* h) override {
    Log("DownloadAsync");
    cpu_->Download(d, b, h);
  }
  int64_t Fence() override {
    Log("Fence");
    return ++last_fence;
  }
  void WaitFor(int64_t f) override {
    Log("WaitFor");
    last_wait = f;
  }
  bool Reached(int64_t) override { return reached; }
  bool PinHost(void*, int64_t) override { return false; }
  void UnpinHost(void*) override {}
  std::string error() const override { return cpu_->error(); }
  int64_t peak_bytes() const override { return cpu_->peak_bytes(); }
  void SetMemoryLimit(int64_t bytes) override { cpu_->SetMemoryLimit(bytes); }
  bool SetPrecision(kernels::Precision p, std::string* why) override {
    return cpu_->SetPrecision(p, why);
  }
  void Gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, const float* b,
            float beta, float* c) override {
    Log("Gemm");
    cpu_->Gemm(ta, tb, m, n, k, alpha, a, b, beta, c);
  }
  void AddBias(int r, int c, const float* b, float* y) override { cpu_->AddBias(r, c, b, y); }
  void BiasGrad(int r, int c, const float* dy, float* db) override { cpu_->BiasGrad(r, c, dy, db); }
  void ReluForward(int64_t n, const float* x, float* y) override { cpu_->ReluForward(n, x, y); }
  void ReluBackward(int64_t n, const float* y, const float* dy, float* dx) override {
    cpu_->ReluBackward(n, y, dy, dx);
  }
  float SoftmaxXent(int r, int c, const float* z, const int32_t* l, float* dz,
                    int* right) override {
    return cpu_->SoftmaxXent(r, c, z, l, dz, right);
  }
  void Scale(int64_t n, float a, float* x) override { cpu_->Scale(n, a, x); }
  void Axpy(int64_t n, float a, const float* x, float* y) override { cpu_->Axpy(n, a, x, y); }
  void Embedding(int r, int d, const int32_t* ids, const float* t, float* o, bool acc) override {
    cpu_->Embedding(r, d, ids, t, o, acc);
  }
  void EmbeddingBackward(int r, int d, const int32_t* ids, const float* dout, float* dt) override {
    cpu_->EmbeddingBackward(r, d, ids, dout, dt);
  }
  void LayerNorm(int r, int d, const float* x, const float* g, const float* b, float* y, float* m,
                 float* s) override {
    cpu_->LayerNorm(r, d, x, g, b, y, m, s);
  }
  void LayerNormBackward(int r, int d, const float* x, const float* g, const float* m,
                         const float* s, const float* dy, float* dx, float* dg,
                         float* db) override {
    cpu_->LayerNormBackward(r, d, x, g, m, s, dy, dx, dg, db);
  }
  void Gelu(int64_t n, const float* x, float* y) override { cpu_->Gelu(n, x, y); }
  void GeluBackward(int64_t n, const float* x, const float* dy, float* dx) override {
    cpu_->GeluBackward(n, x, dy, dx);
  }
  void Attention(int b, int s, int h, int d, const float* qkv, float* lse, float* out) override {
    cpu_->Attention(b, s, h, d, qkv, lse, out);
  }
  void AttentionBackward(int b, int s, int h, int d, const float* qkv, const float* out,
                         const float* lse, const float* dout, float* dqkv) override {
    cpu_->AttentionBackward(b, s, h, d, qkv, out, lse, dout, dqkv);
  }

 private:
  void Log(const char* call) { calls.push_back(call); }
  std::unique_ptr<kernels::Backend> cpu_ = kernels::MakeCpuBackend(1);
};

ModelSpec TinyGpt() {
  JobSpec job;
  job.mutable_model()->set_kind(GPT);
  GptSpec* gpt = job.mutable_model()->mutable_gpt();
  gpt->set_layers(2);
  gpt->set_heads(2);
  gpt->set_width(8);
  gpt->set_context(4);
  job.set_clocks(1);
  ApplyJobDefaults(&job);
  return job.model();
}

Batch TinyBatch() {
  Batch batch;
  batch.rows = 2;
  for (int i = 0; i < 8; ++i) {
    batch.tokens.push_back(i * 31 % 256);
    batch.labels.push_back(i * 17 % 256);
  }
  return batch;
}

// Regression: worker_bench's "step on the device alone" returned before the
// backward had run on a GPU (nothing waited for it), so it timed the
// forward only and charged the backward to the next step.
TEST(ModelSyncTest, AStepOnTheDeviceAloneEndsWhenTheDeviceIsDone) {
  RecordingBackend backend;
  GptModel model(TinyGpt(), WholeModel(TinyGpt()), &backend);
  model.set_host_sync(false);
  ASSERT_TRUE(model.TrainStep(TinyBatch()).ok());
  ASSERT_GE(backend.calls.size(), 2u);
  EXPECT_EQ(backend.calls.back(), "WaitFor");
  EXPECT_EQ(backend.last_wait, backend.last_fence);
  for (const std::string& call : backend.calls) {
    EXPECT_NE(call, "DownloadAsync") << "no gradient leaves the device";
  }
}

// Each parameter once per step, the head's first, the embeddings' last.
std::vector<int> ReportedOrder(RecordingBackend* backend, size_t* first_report_at) {
  GptModel model(TinyGpt(), WholeModel(TinyGpt()), backend);
  std::vector<int> order;
  *first_report_at = 0;
  model.set_grads_ready([&](const std::vector<int>& params) {
    if (order.empty()) *first_report_at = backend->calls.size();
    order.insert(order.end(), params.begin(), params.end());
  });
  EXPECT_TRUE(model.TrainStep(TinyBatch()).ok());
  return order;
}

TEST(ModelSyncTest, GradientsAreReportedOnceEachAsSoonAsTheyLand) {
  RecordingBackend fast, slow;
  slow.reached = false;  // a device far behind the host: nothing has landed
  size_t fast_first = 0, slow_first = 0;
  const std::vector<int> fast_order = ReportedOrder(&fast, &fast_first);
  const std::vector<int> slow_order = ReportedOrder(&slow, &slow_first);
  EXPECT_EQ(fast_order, slow_order);
  std::vector<int> sorted = fast_order;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> all(2 + 12 * 2 + 3);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  EXPECT_EQ(sorted, all);
  // The head (the last parameter) first; the embeddings (0 and 1) last.
  EXPECT_EQ(fast_order.front(), static_cast<int>(all.size()) - 1);
  EXPECT_EQ(std::vector<int>(fast_order.end() - 2, fast_order.end()), (std::vector<int>{0, 1}));
  // Landed copies are reported while the backward still runs (more
  // products follow the first report); with nothing landed, only at the
  // end, after the last product.
  auto last_gemm = [](const RecordingBackend& b) {
    return std::find(b.calls.rbegin(), b.calls.rend(), "Gemm").base() - b.calls.begin();
  };
  EXPECT_LT(fast_first, static_cast<size_t>(last_gemm(fast)));
  EXPECT_GT(slow_first, static_cast<size_t>(last_gemm(slow)));
}

}  // namespace
}  // namespace pstrain
