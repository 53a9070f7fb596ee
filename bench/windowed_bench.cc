// A worker's GPT training step under a device memory budget (ps_worker
// --device_memory_budget) next to the same step with everything resident,
// interleaved round by round on the same device: step times, the median of
// the paired ratios, each one's peak device memory, the plan, and how far
// the gradients are apart. The default model and batch are those of
// deploy/jobs/gpt_fortunes.pbtxt's workers (2 blocks, width 128, 16
// sequences of 64 bytes); the budget defaults to half of what the resident
// step holds. Prints JSON.
//
//   bazel run -c opt //bench:windowed_bench -- [--device=cpu] [--layers=2
//       --width=128 --heads=4 --context=64 --batch=16] [--budget_fraction=0.5]
//       [--rounds=7]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/params.h"
#include "common/stage_plan.h"
#include "worker/device.h"
#include "worker/models/gpt_model.h"

ABSL_FLAG(std::string, device, "cpu", "auto, cpu, cuda or cuda:N");
ABSL_FLAG(int, layers, 2, "GPT blocks");
ABSL_FLAG(int, width, 128, "model width");
ABSL_FLAG(int, heads, 4, "attention heads");
ABSL_FLAG(int, context, 64, "tokens per sequence");
ABSL_FLAG(int, batch, 16, "sequences per step (a worker's share)");
ABSL_FLAG(double, budget_fraction, 0.5, "the budget, as a fraction of the resident step's peak");
ABSL_FLAG(int, rounds, 7, "timed rounds (after one warm-up step each)");

namespace pstrain {
namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

ModelSpec Spec() {
  JobSpec job;
  job.mutable_model()->set_kind(GPT);
  GptSpec* g = job.mutable_model()->mutable_gpt();
  g->set_layers(absl::GetFlag(FLAGS_layers));
  g->set_width(absl::GetFlag(FLAGS_width));
  g->set_heads(absl::GetFlag(FLAGS_heads));
  g->set_context(absl::GetFlag(FLAGS_context));
  job.set_clocks(1);
  ApplyJobDefaults(&job);
  return job.model();
}

// A model on its own device, its weights from the initializer, and one
// step: the plan's micro-batches, their gradients added up (as the clock
// loop does).
struct Worker {
  std::unique_ptr<kernels::Backend> backend;
  std::unique_ptr<Model> model;
  int split = 1;
  std::vector<std::vector<float>> grads;

  Worker(const ModelSpec& spec, const GptMemoryPlan* plan) {
    std::string note;
    backend = OpenDevice(absl::GetFlag(FLAGS_device), 1, &note).value();
    if (plan != nullptr) {
      backend->SetMemoryLimit(plan->budget);
      split = plan->split;
    }
    model = MakeStageModel(spec, WholeModel(spec), backend.get(), false, plan);
    const std::vector<ParamInfo>& params = model->params();
    for (size_t p = 0; p < params.size(); ++p) {
      for (int64_t i = 0; i < params[p].numel; ++i) {
        model->weights()[p][i] = InitialValue(1, params[p], i);
      }
    }
  }
  double Step(const Batch& batch) {
    const Clock::time_point t0 = Clock::now();
    grads.assign(model->params().size(), {});
    for (int m = 0; m < split; ++m) {
      const int rows = batch.rows / split;
      absl::StatusOr<StepResult> r = model->TrainStep(SliceBatch(batch, m * rows, (m + 1) * rows));
      if (!r.ok()) {
        std::fprintf(stderr, "windowed_bench: %s\n", std::string(r.status().message()).c_str());
        std::exit(1);
      }
      for (size_t p = 0; p < grads.size(); ++p) {
        const std::vector<float>& g = model->grads()[p];
        grads[p].resize(g.size());
        for (size_t i = 0; i < g.size(); ++i) grads[p][i] += g[i] / static_cast<float>(split);
      }
    }
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }
};

double RelativeDifference(const Worker& a, const Worker& b) {
  double diff = 0, mag = 0;
  for (size_t p = 0; p < a.grads.size(); ++p) {
    for (size_t i = 0; i < a.grads[p].size(); ++i) {
      diff = std::max(diff, static_cast<double>(std::fabs(a.grads[p][i] - b.grads[p][i])));
      mag = std::max(mag, static_cast<double>(std::fabs(a.grads[p][i])));
    }
  }
  return mag > 0 ? diff / mag : 0;
}

int Main() {
  const ModelSpec spec = Spec();
  const int seqs = absl::GetFlag(FLAGS_batch), t = spec.gpt().context();
  Batch batch;
  batch.rows = seqs;
  std::mt19937 rng(5);
  for (int i = 0; i < seqs * t; ++i) {
    batch.tokens.push_back(static_cast<int32_t>(rng() % kGptVocab));
    batch.labels.push_back(static_cast<int32_t>(rng() % kGptVocab));
  }
  Worker resident(spec, nullptr);
  resident.Step(batch);  // warm-up; its peak is the reference
  const int64_t budget =
      static_cast<int64_t>(absl::GetFlag(FLAGS_budget_fraction) * resident.backend->peak_bytes());
  absl::StatusOr<GptMemoryPlan> plan =
      PlanGptMemory(spec, WholeModel(spec), seqs, 1, seqs, budget, /*may_split=*/true);
  if (!plan.ok()) {
    std::fprintf(stderr, "windowed_bench: %s\n", std::string(plan.status().message()).c_str());
    return 1;
  }
  Worker windowed(spec, &*plan);
  windowed.Step(batch);
  std::vector<double> free_s, budget_s, ratio;
  for (int r = 0; r < absl::GetFlag(FLAGS_rounds); ++r) {
    free_s.push_back(resident.Step(batch));
    budget_s.push_back(windowed.Step(batch));
    ratio.push_back(budget_s.back() / free_s.back());
  }
  std::printf(
      "{\n  \"bench\": \"windowed_bench\",\n  \"device\": \"%s\",\n  \"plan\": \"%s\",\n"
      "  \"budget_bytes\": %lld,\n  \"resident_peak_bytes\": %lld,\n"
      "  \"windowed_peak_bytes\": %lld,\n  \"resident_step_s\": %.4f,\n"
      "  \"windowed_step_s\": %.4f,\n  \"windowed_vs_resident\": %.3f,\n"
      "  \"windowed_vs_resident_range\": [%.3f, %.3f],\n  \"goal\": 1.3,\n  \"goal_pass\": %s,\n"
      "  \"gradient_relative_difference\": %.3g\n}\n",
      resident.backend->name(), plan->Describe().c_str(), static_cast<long long>(budget),
      static_cast<long long>(resident.backend->peak_bytes()),
      static_cast<long long>(windowed.backend->peak_bytes()), Median(free_s), Median(budget_s),
      Median(ratio), *std::min_element(ratio.begin(), ratio.end()),
      *std::max_element(ratio.begin(), ratio.end()), Median(ratio) <= 1.3 ? "true" : "false",
      RelativeDifference(resident, windowed));
  return windowed.backend->peak_bytes() <= budget ? 0 : 1;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  pstrain::LogToStderr();
  absl::ParseCommandLine(argc, argv);
  return pstrain::Main();
}
