// A GPT windowed under a device memory budget (ps_worker
// --device_memory_budget) computes exactly the gradients and evaluation of
// the same model with everything resident, holds at most the budget on the
// device (the CPU backend refuses more), recomputes activations only when
// they do not fit, and a budget below the minimum is refused naming it.
#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/stage_plan.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "worker/models/gpt_model.h"
#include "worker/models/test_models.h"

namespace pstrain {
namespace {

// 8 blocks of width 64 (context 16): the weights outweigh the activations
// of 2-sequence micro-batches.
JobSpec WideGpt() {
  JobSpec job = testing::TinyGpt(8);
  job.mutable_model()->mutable_gpt()->set_width(64);
  job.mutable_model()->mutable_gpt()->set_context(16);
  return job;
}

struct Stepped {
  testing::Buffers grads;
  StepResult train, eval;
  int64_t peak = 0;
  std::string error;
};

// Two training steps and an evaluation of `stage`, windowed under `plan`
// (null: everything resident).
Stepped Train(const JobSpec& job, const Stage& stage, const GptMemoryPlan* plan) {
  auto backend = kernels::MakeCpuBackend(1);
  if (plan != nullptr) backend->SetMemoryLimit(plan->budget);
  std::unique_ptr<Model> model = MakeStageModel(job.model(), stage, backend.get(), false, plan);
  const testing::Buffers all = testing::NoisyWeights(job.model());
  std::copy(all.begin() + stage.first_param, all.begin() + stage.end_param,
            model->weights().begin());
  const Batch batch = testing::RandomTokens(2, 16);
  Stepped out;
  for (int step = 0; step < 2; ++step) {
    absl::StatusOr<StepResult> r = model->TrainStep(batch);
    if (!r.ok()) {
      out.error = std::string(r.status().message());
      return out;
    }
    out.train = *r;
  }
  out.grads = model->grads();
  absl::StatusOr<StepResult> e = model->Evaluate(testing::RandomTokens(2, 16, 7));
  if (e.ok()) out.eval = *e;
  out.peak = backend->peak_bytes();
  return out;
}

void ExpectSame(const Stepped& a, const Stepped& b) {
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t p = 0; p < a.grads.size(); ++p) EXPECT_EQ(a.grads[p], b.grads[p]) << p;
  EXPECT_EQ(a.train.loss, b.train.loss);
  EXPECT_EQ(a.eval.loss, b.eval.loss);
  EXPECT_EQ(a.eval.correct, b.eval.correct);
}

// The whole WideGpt windowed under `budget` (a function of the resident
// run's peak and the unlimited plan) trains exactly as resident and holds at
// most the budget and the plan's peak; the plan used.
GptMemoryPlan ExpectWindowedAsResident(
    const std::function<int64_t(int64_t peak, const GptMemoryPlan& unlimited)>& budget_of) {
  const JobSpec job = WideGpt();
  const Stage whole = WholeModel(job.model());
  const Stepped resident = Train(job, whole, nullptr);
  EXPECT_TRUE(resident.error.empty()) << resident.error;
  const GptMemoryPlan unlimited = *PlanGptMemory(job.model(), whole, 2, 1, 2, 1LL << 40);
  // The plan's estimate of everything resident is what the model held.
  EXPECT_EQ(unlimited.unbudgeted_bytes, resident.peak);
  const int64_t budget = budget_of(resident.peak, unlimited);
  absl::StatusOr<GptMemoryPlan> plan = PlanGptMemory(job.model(), whole, 2, 1, 2, budget);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return {};
  const Stepped windowed = Train(job, whole, &*plan);
  EXPECT_TRUE(windowed.error.empty()) << windowed.error;
  ExpectSame(resident, windowed);
  EXPECT_LE(windowed.peak, budget);
  EXPECT_LE(windowed.peak, plan->peak_bytes);
  return *plan;
}

TEST(WindowedGptTest, UnderHalfTheMemoryTheGradientsAreTheSame) {
  ExpectWindowedAsResident([](int64_t peak, const GptMemoryPlan&) { return peak / 2; });
}

TEST(WindowedGptTest, ActivationsThatFitAreKept) {
  const GptMemoryPlan plan = ExpectWindowedAsResident([](int64_t, const GptMemoryPlan& kept) {
    return kept.window_bytes + kept.activation_bytes;
  });
  EXPECT_FALSE(plan.recompute) << plan.Describe();
}

TEST(WindowedGptTest, ActivationsBeyondTheBudgetAreRecomputed) {
  // Room for the window but not for every block's activations.
  const GptMemoryPlan plan = ExpectWindowedAsResident([](int64_t, const GptMemoryPlan& kept) {
    return kept.window_bytes + kept.activation_bytes - 1;
  });
  EXPECT_TRUE(plan.recompute) << plan.Describe();
}

// Two stages, each windowed under half of what it holds resident: one
// micro-batch forward through both and back gives both stages' resident
// gradients.
testing::Buffers TwoStages(const JobSpec& job, bool windowed, int64_t* peak) {
  const std::vector<Stage> stages = *PlanStages(job.model(), 2);
  std::vector<std::unique_ptr<kernels::Backend>> backends;
  std::vector<std::unique_ptr<Model>> models;
  std::vector<GptMemoryPlan> plans(2);
  const testing::Buffers all = testing::NoisyWeights(job.model());
  for (int i = 0; i < 2; ++i) {
    backends.push_back(kernels::MakeCpuBackend(1));
    const GptMemoryPlan* plan = nullptr;
    if (windowed) {
      absl::StatusOr<GptMemoryPlan> full =
          PlanGptMemory(job.model(), stages[i], 2, 1, 2, int64_t{1} << 40);
      absl::StatusOr<GptMemoryPlan> p =
          PlanGptMemory(job.model(), stages[i], 2, 1, 2, full->unbudgeted_bytes / 2);
      EXPECT_TRUE(p.ok()) << p.status();
      plans[i] = *p;
      plan = &plans[i];
      backends[i]->SetMemoryLimit(plan->budget);
    }
    models.push_back(MakeStageModel(job.model(), stages[i], backends[i].get(), false, plan));
    std::copy(all.begin() + stages[i].first_param, all.begin() + stages[i].end_param,
              models[i]->weights().begin());
  }
  const Batch batch = testing::RandomTokens(2, 16);
  std::vector<float> acts, grad_in;
  EXPECT_TRUE(models[0]->Forward(0, batch, nullptr, &acts, true).ok());
  EXPECT_TRUE(models[1]->Forward(0, batch, &acts, nullptr, true).ok());
  EXPECT_TRUE(models[1]->Backward(0, nullptr, &grad_in).ok());
  EXPECT_TRUE(models[0]->Backward(0, &grad_in, nullptr).ok());
  testing::Buffers grads = models[0]->grads();
  grads.insert(grads.end(), models[1]->grads().begin(), models[1]->grads().end());
  for (int i = 0; i < 2; ++i) {
    if (windowed) {
      EXPECT_LE(backends[i]->peak_bytes(), plans[i].budget) << i;
    }
    *peak = std::max(*peak, backends[i]->peak_bytes());
  }
  return grads;
}

TEST(WindowedGptTest, EachPipelineStageWindowsItsOwnUnits) {
  const JobSpec job = WideGpt();
  int64_t resident_peak = 0, windowed_peak = 0;
  const testing::Buffers resident = TwoStages(job, false, &resident_peak);
  const testing::Buffers windowed = TwoStages(job, true, &windowed_peak);
  ASSERT_EQ(resident.size(), windowed.size());
  for (size_t p = 0; p < resident.size(); ++p) EXPECT_EQ(resident[p], windowed[p]) << p;
  EXPECT_LT(windowed_peak, resident_peak);
}

TEST(WindowedGptTest, ABudgetBelowTheMinimumIsRefusedNamingIt) {
  const JobSpec job = WideGpt();
  absl::StatusOr<GptMemoryPlan> plan =
      PlanGptMemory(job.model(), WholeModel(job.model()), 2, 1, 2, 100000);
  ASSERT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("minimum of"), std::string::npos) << plan.status();
}

}  // namespace
}  // namespace pstrain
