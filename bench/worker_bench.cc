// worker_bench: a worker's training step of the GPT on one device, in each
// compute dtype: step time, tokens/s, and the achieved TFLOP/s of the step's
// matrix products next to the backend's own GEMM rate (cuBLAS on CUDA,
// OpenBLAS on the CPU) on the same shapes, measured in the same run. Prints
// JSON.
//
//   bazel run //bench:worker_bench -- [--device=auto] [--layers=6 --width=384
//       --heads=6 --context=256 --batch=16] [--dtypes=fp32,bf16] [--steps=10]
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/params.h"
#include "common/status_macros.h"
#include "kernels/device_array.h"
#include "kernels/op_timer.h"
#include "worker/device.h"
#include "worker/models/gpt_model.h"

ABSL_FLAG(std::string, device, "auto", "auto, cpu, cuda or cuda:N");
ABSL_FLAG(int, layers, 6, "GPT blocks");
ABSL_FLAG(int, width, 384, "model width");
ABSL_FLAG(int, heads, 6, "attention heads");
ABSL_FLAG(int, context, 256, "tokens per sequence");
ABSL_FLAG(int, batch, 16, "sequences per step");
ABSL_FLAG(int, steps, 10, "timed rounds (after 2 warm-up steps); medians are quoted");
ABSL_FLAG(std::string, dtypes, "fp32,bf16",
          "compute dtypes to measure: fp32, tf32 (fp32, products on TF32 tensor cores), bf16, fp16");
ABSL_FLAG(std::string, attention, "auto",
          "the 16-bit attention's kernels: auto (cuDNN's where it loads and takes the shape) or "
          "own (the backend's); each run's attention_path says which ran");
ABSL_FLAG(bool, recompute, false, "recompute each block's activations in the backward");
ABSL_FLAG(int, compute_threads, 0,
          "CPU backend: threads for the step, as ps_worker's (0: one, OpenBLAS's default "
          "threads for the products)");
ABSL_FLAG(bool, per_op, false,
          "after the timed rounds, --steps more steps with each backend op timed (on CUDA "
          "each op is waited for): per_op_ms, where a step's time goes");

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

struct Timings {
  std::vector<double> step_s;       // forward + backward on the device alone
  std::vector<double> full_step_s;  // with the weights' upload and the gradients' download
  std::vector<double> gemm_s;       // the step's dense products alone, on the same shapes
  float loss = 0;
  int64_t pinned_bytes = 0;  // of the model's host weights and gradients
  int64_t peak_bytes = 0;    // device memory of the model's steps (not the GEMMs' buffers)
};

// The most memory this process has held (every dtype run so far, the
// backend's scratch and a CPU device's arrays included), in MiB.
double PeakRssMib() {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024.0;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : (v[(v.size() - 1) / 2] + v[v.size() / 2]) / 2;
}
double Min(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }
double Max(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }
double MedianRatio(const std::vector<double>& num, const std::vector<double>& den) {
  std::vector<double> r;
  for (size_t i = 0; i < num.size(); ++i) r.push_back(num[i] / den[i]);
  return Median(r);
}

// Seconds of one pass over the step's dense shapes, each run `repeat` times
// on inputs of the backend's device (allocated once, in *bufs).
double TimeDenseGemms(kernels::Backend* b, const std::vector<Shape>& shapes,
                      std::vector<kernels::DeviceArray<float>>* bufs) {
  if (bufs->empty()) {
    for (const Shape& s : shapes) {
      const int64_t sizes[3] = {static_cast<int64_t>(s.m) * s.k, static_cast<int64_t>(s.k) * s.n,
                                static_cast<int64_t>(s.m) * s.n};
      for (int64_t size : sizes) {
        bufs->emplace_back(b, size);
        std::vector<float> host(size, 0.01f);
        bufs->back().Upload(host.data());
      }
    }
  }
  float sink;
  b->Download(bufs->back().data(), 4, &sink);
  const auto t0 = Clock::now();
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Shape& s = shapes[i];
    for (int r = 0; r < s.repeat; ++r) {
      b->Gemm(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, (*bufs)[3 * i].data(),
              (*bufs)[3 * i + 1].data(), 0.0f, (*bufs)[3 * i + 2].data());
    }
  }
  b->Download(bufs->back().data(), 4, &sink);
  return Seconds(t0);
}

// `steps` rounds, each timing in turn a step on the device alone, a step
// with the host copies a worker makes (weights up, gradients down) and the
// dense products alone, after two warm-up steps.
absl::StatusOr<Timings> Measure(kernels::Backend* b, GptModel* model, const Batch& batch,
                                const std::vector<Shape>& shapes, int steps) {
  Timings t;
  std::vector<kernels::DeviceArray<float>> bufs;
  for (int i = 0; i < 2; ++i) {
    RETURN_IF_ERROR(model->TrainStep(batch).status());
  }
  // The steps hold all they will (scratch is kept), before the dense
  // products' own buffers come.
  t.peak_bytes = b->peak_bytes();
  for (int i = 0; i < steps; ++i) {
    for (bool host_sync : {false, true}) {
      model->set_host_sync(host_sync);
      const auto t0 = Clock::now();
      // Both end by reading the loss back, and the second by downloading
      // the gradients: synchronous.
      ASSIGN_OR_RETURN(const StepResult r, model->TrainStep(batch));
      (host_sync ? t.full_step_s : t.step_s).push_back(Seconds(t0));
      t.loss = r.loss;
    }
    t.gemm_s.push_back(TimeDenseGemms(b, shapes, &bufs));
  }
  if (!b->error().empty()) return absl::InternalError(b->error());
  t.pinned_bytes = model->pinned_bytes();
  return t;
}

// The benchmark's GPT from the flags (checked).
absl::StatusOr<JobSpec> BenchJob() {
  JobSpec job;
  job.mutable_model()->set_kind(GPT);
  GptSpec* gpt = job.mutable_model()->mutable_gpt();
  gpt->set_layers(absl::GetFlag(FLAGS_layers));
  gpt->set_width(absl::GetFlag(FLAGS_width));
  gpt->set_heads(absl::GetFlag(FLAGS_heads));
  gpt->set_context(absl::GetFlag(FLAGS_context));
  job.set_clocks(1);
  ApplyJobDefaults(&job);
  if (const absl::Status st = ValidateJobSpec(job); !st.ok()) return st;
  if (absl::GetFlag(FLAGS_steps) < 1 || absl::GetFlag(FLAGS_batch) < 1) {
    return absl::InvalidArgumentError("--steps and --batch must be at least 1");
  }
  return job;
}

// The step's matrix products over `n` tokens: per block qkv, proj, fc, mlp
// proj and the head, each forward (x W) and backward (dW = x^T dy,
// dx = dy W^T).
std::vector<Shape> StepShapes(const GptSpec& gpt, int64_t n) {
  const int c = gpt.width(), layers = gpt.layers();
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
  return shapes;
}

Batch RandomBatch(int seqs, int64_t n) {
  Batch batch;
  batch.rows = seqs;
  std::mt19937 rng(1);
  for (int64_t i = 0; i < n; ++i) {
    batch.tokens.push_back(static_cast<int32_t>(rng() % 256));
    batch.labels.push_back(static_cast<int32_t>(rng() % 256));
  }
  return batch;
}

struct StepWork {
  std::vector<Shape> shapes;
  double dense_flops = 0, attention_flops = 0;
  int64_t tokens = 0;
};

// `steps` steps as a worker makes them (weights up, gradients down) with
// every op timed: a JSON object of ms per step and calls per step by op,
// the ops' sum, and the step's time outside them.
absl::StatusOr<std::string> PerOp(kernels::OpTimer* timer, GptModel* model, const Batch& batch,
                                  int steps) {
  model->set_host_sync(true);
  timer->Reset();
  timer->set_on(true);
  const auto t0 = Clock::now();
  for (int i = 0; i < steps; ++i) {
    const absl::StatusOr<StepResult> r = model->TrainStep(batch);
    if (!r.ok()) {
      timer->set_on(false);
      return r.status();
    }
  }
  const double step_ms = Seconds(t0) * 1e3 / steps;
  timer->set_on(false);
  std::vector<std::pair<std::string, kernels::OpTime>> ops(timer->times().begin(),
                                                           timer->times().end());
  std::sort(ops.begin(), ops.end(),
            [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  std::string json = "{";
  double sum_ms = 0;
  for (const auto& [name, t] : ops) {
    const double ms = t.seconds * 1e3 / steps;
    sum_ms += ms;
    json += absl::StrFormat("\"%s\": [%.3f, %lld], ", name, ms,
                            static_cast<long long>(t.calls / steps));
  }
  return json +
         absl::StrFormat("\"ops_ms\": %.3f, \"outside_ops_ms\": %.3f}", sum_ms, step_ms - sum_ms);
}

// One dtype's run on a fresh device (its peak memory is this dtype's
// alone): a JSON object, or a skipped one; false on an error.
bool RunDtype(const JobSpec& job, const std::string& name, const Batch& batch, const StepWork& work,
              bool last) {
  kernels::Precision precision = kernels::Precision::kFp32;
  if (name == "bf16") precision = kernels::Precision::kBf16;
  if (name == "fp16") precision = kernels::Precision::kFp16;
  std::string note;
  auto backend =
      OpenDevice(absl::GetFlag(FLAGS_device), absl::GetFlag(FLAGS_compute_threads), &note);
  if (!backend.ok()) {
    std::fprintf(stderr, "worker_bench: %s\n", std::string(backend.status().message()).c_str());
    return false;
  }
  kernels::OpTimer timer(backend->get());  // off until PerOp
  kernels::Backend* b = &timer;
  std::string why;
  // tf32: fp32 whose products run on TF32 tensor cores (ps_worker --tf32).
  const bool known = name == "fp32" || name == "tf32" || name == "bf16" || name == "fp16";
  if (!known || !b->SetPrecision(precision, &why) || !b->AllowTf32(name == "tf32", &why)) {
    std::printf("    {\"dtype\": \"%s\", \"skipped\": \"%s\"}%s\n", name.c_str(),
                why.empty() ? "unknown dtype" : why.c_str(), last ? "" : ",");
    return true;
  }
  b->SetAttentionLibrary(absl::GetFlag(FLAGS_attention) == "own" ? kernels::AttentionLibrary::kOwn
                                                                  : kernels::AttentionLibrary::kAuto);
  GptModel model(job.model(), WholeModel(job.model()), b, absl::GetFlag(FLAGS_recompute));
  for (size_t p = 0; p < model.params().size(); ++p) {
    for (int64_t i = 0; i < model.params()[p].numel; ++i) {
      model.weights()[p][i] = InitialValue(1, model.params()[p], i);
    }
  }
  const absl::StatusOr<Timings> t =
      Measure(b, &model, batch, work.shapes, absl::GetFlag(FLAGS_steps));
  if (!t.ok()) {
    std::fprintf(stderr, "worker_bench: %s\n", std::string(t.status().message()).c_str());
    return false;
  }
  std::string per_op = "null";
  if (absl::GetFlag(FLAGS_per_op)) {
    const absl::StatusOr<std::string> ops =
        PerOp(&timer, &model, batch, absl::GetFlag(FLAGS_steps));
    if (!ops.ok()) {
      std::fprintf(stderr, "worker_bench: %s\n", std::string(ops.status().message()).c_str());
      return false;
    }
    per_op = *ops;
  }
  const double step_s = Median(t->step_s), full_s = Median(t->full_step_s);
  const double gemm_s = Median(t->gemm_s), n = static_cast<double>(work.tokens);
  std::printf(
      "    {\"dtype\": \"%s\", \"step_ms\": %.3f, \"step_ms_min\": %.3f, "
      "\"step_ms_max\": %.3f, \"tokens_per_s\": %.0f,\n"
      "     \"step_with_host_copies_ms\": %.3f, \"tokens_per_s_with_host_copies\": %.0f, "
      "\"loss\": %.4f, \"peak_device_mib\": %.1f, \"pinned_host_mib\": %.1f, "
      "\"peak_process_rss_mib\": %.1f,\n"
      "     \"step_matmul_tflops\": %.3f, \"dense_matmul_tflops_in_step\": %.3f, "
      "\"backend_gemm_tflops_same_shapes\": %.3f, \"dense_gemm_ms_per_step_alone\": %.3f, "
      "\"dense_gemm_share_of_step_paired_median\": %.3f,\n"
      "     \"attention_path\": \"%s\", \"per_op_ms\": %s}%s\n",
      name.c_str(), step_s * 1e3, Min(t->step_s) * 1e3, Max(t->step_s) * 1e3, n / step_s,
      full_s * 1e3, n / full_s, t->loss, t->peak_bytes / 1048576.0, t->pinned_bytes / 1048576.0,
      PeakRssMib(), (work.dense_flops + work.attention_flops) / step_s / 1e12,
      work.dense_flops / step_s / 1e12, work.dense_flops / gemm_s / 1e12, gemm_s * 1e3,
      MedianRatio(t->gemm_s, t->step_s), absl::CEscape(b->attention_path()).c_str(),
      per_op.c_str(),
      last ? "" : ",");
  std::fflush(stdout);
  return true;
}

int Run() {
  std::string note;
  {
    // The device's description (each dtype then opens its own).
    auto backend =
        OpenDevice(absl::GetFlag(FLAGS_device), absl::GetFlag(FLAGS_compute_threads), &note);
    if (!backend.ok()) {
      std::fprintf(stderr, "worker_bench: %s\n", std::string(backend.status().message()).c_str());
      return 2;
    }
  }
  const absl::StatusOr<JobSpec> job = BenchJob();
  if (!job.ok()) {
    std::fprintf(stderr, "worker_bench: %s\n", std::string(job.status().message()).c_str());
    return 2;
  }
  const GptSpec& gpt = job->model().gpt();
  const int seqs = absl::GetFlag(FLAGS_batch);
  const int64_t t = gpt.context(), c = gpt.width(), layers = gpt.layers();
  StepWork work;
  work.tokens = seqs * t;
  work.shapes = StepShapes(gpt, work.tokens);
  for (const Shape& s : work.shapes) work.dense_flops += 2.0 * s.m * s.n * s.k * s.repeat;
  // Attention's products (q k^T, a v forward; four backward), in fp32.
  work.attention_flops = 12.0 * seqs * t * t * c * layers;
  const Batch batch = RandomBatch(seqs, work.tokens);
  std::printf("{\n  \"bench\": \"worker_bench\",\n  \"device\": \"%s\",\n", note.c_str());
  std::printf(
      "  \"model\": {\"layers\": %lld, \"width\": %lld, \"heads\": %d, \"context\": %lld, "
      "\"batch\": %d, \"tokens_per_step\": %lld, \"recompute\": %s},\n",
      static_cast<long long>(layers), static_cast<long long>(c), gpt.heads(),
      static_cast<long long>(t), seqs, static_cast<long long>(work.tokens),
      absl::GetFlag(FLAGS_recompute) ? "true" : "false");
  std::printf("  \"matmul_gflop_per_step\": {\"dense\": %.2f, \"attention_fp32\": %.2f},\n",
              work.dense_flops / 1e9, work.attention_flops / 1e9);
  std::printf("  \"runs\": [\n");
  const std::vector<std::string> dtypes = absl::StrSplit(absl::GetFlag(FLAGS_dtypes), ',');
  for (size_t d = 0; d < dtypes.size(); ++d) {
    if (!RunDtype(*job, dtypes[d], batch, work, d + 1 == dtypes.size())) return 1;
  }
  std::printf(
      "  ],\n  \"note\": \"medians of --steps rounds; each round times a step on the "
      "device alone (step_ms: forward + backward, the loss read back), a step with the "
      "worker's host copies (weights uploaded, gradients downloaded) and the step's dense "
      "products alone through the backend's Gemm (cuBLAS or OpenBLAS); step_matmul_tflops "
      "counts the step's matrix products over the whole step; per_op_ms: op -> [ms, calls] "
      "per step over --steps more steps with the host copies, each op timed (and waited "
      "for), outside_ops_ms the rest of the step\"\n}\n");
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  pstrain::LogToStderr();
  absl::ParseCommandLine(argc, argv);
  return pstrain::Run();
}
