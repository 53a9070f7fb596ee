// A model cut into pipeline stages computes what the whole model computes:
// the stages chained in process (activations forward, their gradients
// backward, micro-batches in stashes of their own) give the whole model's
// loss and gradients.
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "common/job_spec.h"
#include "common/params.h"
#include "common/stage_plan.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "worker/models/model.h"
#include "worker/models/test_models.h"

namespace pstrain {
namespace {

using testing::Buffers;

JobSpec Mlp() {
  JobSpec job;
  job.mutable_data()->set_dataset(SYNTHETIC);
  job.mutable_data()->set_synthetic_dim(6);
  job.mutable_data()->set_synthetic_classes(3);
  ModelSpec* m = job.mutable_model();
  for (int units : {7, 5, 3}) {
    LayerSpec* l = m->add_layers();
    l->set_type(DENSE);
    l->set_units(units);
    if (units != 3) m->add_layers()->set_type(RELU);
  }
  m->add_layers()->set_type(SOFTMAX_XENT);
  ApplyJobDefaults(&job);
  return job;
}

JobSpec Gpt() { return testing::TinyGpt(3); }

Batch RandomBatch(const JobSpec& job, int rows, std::mt19937& rng) {
  if (job.model().kind() == GPT)
    return testing::RandomTokens(rows, job.model().gpt().context(), rng());
  Batch b;
  b.rows = rows;
  std::uniform_real_distribution<float> u(-1, 1);
  b.x.resize(static_cast<size_t>(rows) * job.model().input_dim());
  for (float& v : b.x) v = u(rng);
  for (int i = 0; i < rows; ++i) b.labels.push_back(i % 3);
  return b;
}

struct Result {
  double loss = 0;
  Buffers grads;  // every parameter of the model
};

Result Whole(const JobSpec& job, const Batch& batch) {
  auto backend = kernels::MakeCpuBackend(1);
  std::unique_ptr<Model> model = MakeModel(job.model(), backend.get());
  model->weights() = testing::NoisyWeights(job.model());
  absl::StatusOr<StepResult> r = model->TrainStep(batch);
  EXPECT_TRUE(r.ok()) << r.status();
  return {r.ok() ? r->loss : -1, model->grads()};
}

// The stages of `stages`, chained: every forward of `micro` equal
// micro-batches first (each in its own stash), then every backward; the
// gradients of the mean loss (each micro-batch's weighted by its share).
Result Chained(const JobSpec& job, const Batch& batch, int stages, int micro,
               bool recompute = false) {
  auto backend = kernels::MakeCpuBackend(1);
  const absl::StatusOr<std::vector<Stage>> plan = PlanStages(job.model(), stages);
  EXPECT_TRUE(plan.ok()) << plan.status();
  const Buffers all = testing::NoisyWeights(job.model());
  std::vector<std::unique_ptr<Model>> models;
  for (const Stage& s : *plan) {
    models.push_back(MakeStageModel(job.model(), s, backend.get(), recompute));
    std::copy(all.begin() + s.first_param, all.begin() + s.end_param,
              models.back()->weights().begin());
  }
  Result out;
  for (const std::vector<float>& w : all) out.grads.emplace_back(w.size(), 0.0f);
  const int rows = batch.rows / micro;
  for (int m = 0; m < micro; ++m) {
    const Batch part = SliceBatch(batch, m * rows, (m + 1) * rows);
    std::vector<float> act, next;
    for (int s = 0; s < stages; ++s) {
      absl::StatusOr<StepResult> r = models[s]->Forward(m, part, &act, &next, /*train=*/true);
      EXPECT_TRUE(r.ok()) << r.status();
      if (s + 1 == stages) out.loss += r->loss / micro;
      std::swap(act, next);
    }
  }
  for (int m = 0; m < micro; ++m) {
    std::vector<float> grad, next;
    for (int s = stages - 1; s >= 0; --s) {
      Model& model = *models[s];
      const absl::Status st = model.Backward(m, s + 1 == stages ? nullptr : &grad, &next);
      EXPECT_TRUE(st.ok()) << st;
      for (size_t p = 0; p < model.grads().size(); ++p) {
        std::vector<float>& sum = out.grads[model.stage().first_param + p];
        for (size_t i = 0; i < sum.size(); ++i) sum[i] += model.grads()[p][i] / micro;
      }
      std::swap(grad, next);
    }
  }
  return out;
}

void ExpectStagesMatchTheWholeModel(const JobSpec& job) {
  ASSERT_TRUE(ValidateJobSpec(job).ok()) << ValidateJobSpec(job);
  std::mt19937 rng(7);
  const Batch batch = RandomBatch(job, 8, rng);
  const Result whole = Whole(job, batch);
  for (int stages : {1, 2, 3}) {
    for (int micro : {1, 2, 4}) {
      const Result chained = Chained(job, batch, stages, micro);
      const double diff = testing::MaxRelativeDifference(whole.grads, chained.grads);
      EXPECT_NEAR(chained.loss, whole.loss, 1e-5 * std::abs(whole.loss));
      EXPECT_LE(diff, 1e-5) << stages << " stages, " << micro << " micro-batches";
      if (micro == 1) {
        EXPECT_EQ(diff, 0.0) << stages << " stages: the same sums in the same order";
      }
    }
  }
}

TEST(StageTest, MlpStagesComputeTheWholeModelsGradients) { ExpectStagesMatchTheWholeModel(Mlp()); }

TEST(StageTest, GptStagesComputeTheWholeModelsGradients) { ExpectStagesMatchTheWholeModel(Gpt()); }

TEST(StageTest, GptStagesThatRecomputeTheirBlocksComputeTheSame) {
  const JobSpec job = Gpt();
  std::mt19937 rng(7);
  const Batch batch = RandomBatch(job, 8, rng);
  const Result whole = Whole(job, batch);
  for (int micro : {1, 4}) {
    const Result chained = Chained(job, batch, 3, micro, /*recompute=*/true);
    EXPECT_LE(testing::MaxRelativeDifference(whole.grads, chained.grads), 1e-5) << micro;
  }
}

TEST(StageTest, StagesKnowTheirPlaceAndWidths) {
  const JobSpec job = Gpt();
  auto backend = kernels::MakeCpuBackend(1);
  const std::vector<Stage> plan = *PlanStages(job.model(), 3);
  auto first = MakeStageModel(job.model(), plan[0], backend.get());
  auto middle = MakeStageModel(job.model(), plan[1], backend.get());
  auto last = MakeStageModel(job.model(), plan[2], backend.get());
  EXPECT_TRUE(first->first_stage() && !first->last_stage());
  EXPECT_TRUE(!middle->first_stage() && !middle->last_stage());
  EXPECT_TRUE(!last->first_stage() && last->last_stage());
  EXPECT_EQ(first->params().size(), 2u + 12);
  EXPECT_EQ(middle->params().size(), 12u);
  EXPECT_EQ(last->params().size(), 12u + 3);
  EXPECT_EQ(middle->input_width(), 5 * 8);
  // An input of the wrong size is refused, not read past its end.
  std::mt19937 rng(1);
  const Batch batch = RandomBatch(job, 2, rng);
  std::vector<float> wrong(7), out;
  absl::StatusOr<StepResult> r = middle->Forward(0, batch, &wrong, &out, true);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pstrain
