// worker_bench: a worker's training step of the GPT on one device, in each
// compute dtype: step time, tokens/s, and the achieved TFLOP/s of the step's
// matrix products next to the backend's own GEMM rate (cuBLAS on CUDA,
// OpenBLAS on the CPU) on the same shapes, measured in the same run. Prints
// JSON.
//
//   bazel run //bench:worker_bench -- [--device=auto] [--layers=6 --width=384
//       --heads=6 --context=256 --batch=16] [--dtypes=fp32,bf16] [--steps=10]
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "common/job_spec.h"
#include "common/params.h"
#include "kernels/device_array.h"
#include "worker/device.h"
#include "worker/gpt_model.h"

ABSL_FLAG(std::string, device, "auto", "auto, cpu, cuda or cuda:N");
ABSL_FLAG(int, layers, 6, "GPT blocks");
ABSL_FLAG(int, width, 384, "model width");
ABSL_FLAG(int, heads, 6, "attention heads");
ABSL_FLAG(int, context, 256, "tokens per sequence");
ABSL_FLAG(int, batch, 16, "sequences per step");
ABSL_FLAG(int, steps, 10, "timed steps (after 2 warm-up steps)");
ABSL_FLAG(std::string, dtypes, "fp32,bf16", "compute dtypes to measure");
ABSL_FLAG(bool, recompute, false, "recompute each block's activations in the backward");
ABSL_FLAG(int, compute_threads, 0, "CPU backend: BLAS threads (0: its default)");

namespace pstrain {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

struct Shape {
  int m, n, k;
  bool trans_a, trans_b;
  int repeat;  // per step
};

int Run() {
  std::string note;
  auto backend = OpenDevice(absl::GetFlag(FLAGS_device), absl::GetFlag(FLAGS_compute_threads),
                            &note);
  if (!backend.ok()) {
    std::fprintf(stderr, "worker_bench: %s\n", std::string(backend.status().message()).c_str());
    return 2;
  }
  kernels::Backend* b = backend->get();
  JobSpec job;
  job.mutable_model()->set_kind(GPT);
  GptSpec* gpt = job.mutable_model()->mutable_gpt();
  gpt->set_layers(absl::GetFlag(FLAGS_layers));
  gpt->set_width(absl::GetFlag(FLAGS_width));
  gpt->set_heads(absl::GetFlag(FLAGS_heads));
  gpt->set_context(absl::GetFlag(FLAGS_context));
  job.set_steps(1);
  ApplyJobDefaults(&job);
  if (const absl::Status st = ValidateJobSpec(job); !st.ok()) {
    std::fprintf(stderr, "worker_bench: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  const int seqs = absl::GetFlag(FLAGS_batch), steps = absl::GetFlag(FLAGS_steps);
  const int64_t t = gpt->context(), c = gpt->width(), layers = gpt->layers();
  const int64_t n = seqs * t;
  // The step's matrix products: per block qkv, proj, fc, mlp proj and the
  // head, each forward (x W) and backward (dW = x^T dy, dx = dy W^T).
  std::vector<Shape> shapes;
  auto dense = [&](int in, int out, int per_step) {
    shapes.push_back({static_cast<int>(n), out, in, false, false, per_step});  // forward
    shapes.push_back({in, out, static_cast<int>(n), true, false, per_step});   // dW
    shapes.push_back({static_cast<int>(n), in, out, false, true, per_step});   // dx
  };
  dense(c, 3 * c, layers);
  dense(c, c, layers);
  dense(c, 4 * c, layers);
  dense(4 * c, c, layers);
  dense(c, kGptVocab, 1);
  double dense_flops = 0;
  for (const Shape& s : shapes) dense_flops += 2.0 * s.m * s.n * s.k * s.repeat;
  // Attention's products (q k^T, a v forward; four backward), in fp32.
  const double attention_flops = 12.0 * seqs * t * t * c * layers;

  Batch batch;
  batch.rows = seqs;
  std::mt19937 rng(1);
  for (int64_t i = 0; i < n; ++i) {
    batch.tokens.push_back(static_cast<int32_t>(rng() % 256));
    batch.labels.push_back(static_cast<int32_t>(rng() % 256));
  }
  std::printf("{\n  \"bench\": \"worker_bench\",\n  \"device\": \"%s\",\n", note.c_str());
  std::printf(
      "  \"model\": {\"layers\": %lld, \"width\": %lld, \"heads\": %d, \"context\": %lld, "
      "\"batch\": %d, \"tokens_per_step\": %lld, \"recompute\": %s},\n",
      static_cast<long long>(layers), static_cast<long long>(c), gpt->heads(),
      static_cast<long long>(t), seqs, static_cast<long long>(n),
      absl::GetFlag(FLAGS_recompute) ? "true" : "false");
  std::printf("  \"matmul_gflop_per_step\": {\"dense\": %.2f, \"attention_fp32\": %.2f},\n",
              dense_flops / 1e9, attention_flops / 1e9);
  std::printf("  \"runs\": [\n");
  const std::vector<std::string> dtypes = absl::StrSplit(absl::GetFlag(FLAGS_dtypes), ',');
  for (size_t d = 0; d < dtypes.size(); ++d) {
    const std::string& name = dtypes[d];
    kernels::Precision precision = kernels::Precision::kFp32;
    if (name == "bf16") precision = kernels::Precision::kBf16;
    if (name == "fp16") precision = kernels::Precision::kFp16;
    std::string why;
    if ((name != "fp32" && name != "bf16" && name != "fp16") || !b->SetPrecision(precision, &why)) {
      std::printf("    {\"dtype\": \"%s\", \"skipped\": \"%s\"}%s\n", name.c_str(),
                  why.empty() ? "unknown dtype" : why.c_str(), d + 1 < dtypes.size() ? "," : "");
      continue;
    }
    GptModel model(job.model(), b, absl::GetFlag(FLAGS_recompute));
    for (size_t p = 0; p < model.params().size(); ++p) {
      for (int64_t i = 0; i < model.params()[p].numel; ++i) {
        model.weights()[p][i] = InitialValue(1, model.params()[p], i);
      }
    }
    float loss = 0;
    for (int i = 0; i < 2; ++i) {
      auto r = model.TrainStep(batch);
      if (!r.ok()) {
        std::fprintf(stderr, "worker_bench: %s\n", std::string(r.status().message()).c_str());
        return 1;
      }
    }
    const auto t0 = Clock::now();
    for (int i = 0; i < steps; ++i) {
      auto r = model.TrainStep(batch);  // ends by downloading the gradients: synchronous
      if (!r.ok()) {
        std::fprintf(stderr, "worker_bench: %s\n", std::string(r.status().message()).c_str());
        return 1;
      }
      loss = r->loss;
    }
    const double step_s = Seconds(t0) / steps;
    // The backend's own GEMM rate on the step's dense shapes.
    std::vector<kernels::DeviceArray<float>> bufs;
    double gemm_s = 0;
    for (const Shape& s : shapes) {
      kernels::DeviceArray<float> a(b, static_cast<int64_t>(s.m) * s.k),
          w(b, static_cast<int64_t>(s.k) * s.n), out(b, static_cast<int64_t>(s.m) * s.n);
      std::vector<float> host(std::max(a.size(), w.size()), 0.01f);
      a.Upload(host.data());
      w.Upload(host.data());
      b->Gemm(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, a.data(), w.data(), 0.0f, out.data());
      float sink;
      b->Download(out.data(), 4, &sink);
      const int reps = 5 * s.repeat;
      const auto g0 = Clock::now();
      for (int r = 0; r < reps; ++r) {
        b->Gemm(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, a.data(), w.data(), 0.0f, out.data());
      }
      b->Download(out.data(), 4, &sink);
      gemm_s += Seconds(g0) / 5;  // per step's worth of this shape
    }
    if (!b->error().empty()) {
      std::fprintf(stderr, "worker_bench: %s\n", b->error().c_str());
      return 1;
    }
    std::printf(
        "    {\"dtype\": \"%s\", \"step_ms\": %.2f, \"tokens_per_s\": %.0f, \"loss\": %.4f, "
        "\"peak_device_mib\": %.1f,\n"
        "     \"step_matmul_tflops\": %.3f, \"dense_matmul_tflops_in_step\": %.3f, "
        "\"backend_gemm_tflops_same_shapes\": %.3f, \"dense_gemm_ms_per_step_alone\": %.2f}%s\n",
        name.c_str(), step_s * 1e3, n / step_s, loss, b->peak_bytes() / 1048576.0,
        (dense_flops + attention_flops) / step_s / 1e12, dense_flops / step_s / 1e12,
        dense_flops / gemm_s / 1e12, gemm_s * 1e3, d + 1 < dtypes.size() ? "," : "");
    std::fflush(stdout);
  }
  std::printf("  ],\n  \"note\": \"step_matmul_tflops counts the step's matrix products over the "
              "whole step time (every other op included); backend_gemm_tflops_same_shapes times "
              "the dense products alone\"\n}\n");
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return pstrain::Run();
}
