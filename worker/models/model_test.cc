// The model's gradients against central finite differences of its loss.
#include "worker/models/model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "common/job_spec.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "worker/models/gpt_model.h"

namespace pstrain {
namespace {

TEST(ModelTest, GradientsMatchFiniteDifferences) {
  JobSpec job;
  job.mutable_data()->set_dataset(SYNTHETIC);
  job.mutable_data()->set_synthetic_dim(5);
  job.mutable_data()->set_synthetic_classes(3);
  ModelSpec* m = job.mutable_model();
  for (int units : {4, 3}) {
    LayerSpec* l = m->add_layers();
    l->set_type(DENSE);
    l->set_units(units);
    if (units == 4) m->add_layers()->set_type(RELU);
  }
  m->add_layers()->set_type(SOFTMAX_XENT);
  ApplyJobDefaults(&job);
  ASSERT_TRUE(ValidateJobSpec(job).ok()) << ValidateJobSpec(job);

  auto backend = kernels::MakeCpuBackend(1);
  MlpModel model(job.model(), WholeModel(job.model()), backend.get());
  ASSERT_EQ(model.params().size(), 4u);
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> u(-1, 1);
  for (size_t p = 0; p < model.params().size(); ++p) {
    for (float& w : model.weights()[p]) w = u(rng);
  }
  Batch batch;
  batch.rows = 6;
  batch.x.resize(batch.rows * 5);
  for (float& v : batch.x) v = u(rng);
  batch.labels = {0, 1, 2, 2, 1, 0};
  ASSERT_TRUE(model.TrainStep(batch).ok());
  const std::vector<std::vector<float>> grads = model.grads();

  const float h = 1e-3f;
  for (size_t p = 0; p < model.params().size(); ++p) {
    for (size_t i = 0; i < model.weights()[p].size(); ++i) {
      float& w = model.weights()[p][i];
      const float saved = w;
      w = saved + h;
      const double up = model.Evaluate(batch)->loss;
      w = saved - h;
      const double down = model.Evaluate(batch)->loss;
      w = saved;
      const double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(grads[p][i], numeric, 2e-3 + 1e-2 * std::abs(numeric))
          << model.params()[p].name << "[" << i << "]";
    }
  }
}

}  // namespace
}  // namespace pstrain

namespace pstrain {
namespace {

// A tiny GPT's gradients (every parameter, a sample of its elements)
// against central differences of its loss.
TEST(GptModelTest, GradientsMatchFiniteDifferences) {
  JobSpec job;
  job.mutable_model()->set_kind(GPT);
  GptSpec* gpt = job.mutable_model()->mutable_gpt();
  gpt->set_layers(2);
  gpt->set_heads(2);
  gpt->set_width(8);
  gpt->set_context(5);
  job.set_clocks(1);
  ApplyJobDefaults(&job);
  ASSERT_TRUE(ValidateJobSpec(job).ok()) << ValidateJobSpec(job);
  auto backend = kernels::MakeCpuBackend(1);
  GptModel model(job.model(), WholeModel(job.model()), backend.get());
  ASSERT_EQ(model.params().size(), 2u + 12 * 2 + 3);
  std::mt19937 rng(5);
  for (size_t p = 0; p < model.params().size(); ++p) {
    for (int64_t i = 0; i < model.params()[p].numel; ++i) {
      model.weights()[p][i] = InitialValue(7, model.params()[p], i);
    }
  }
  // Larger weights than the init, so that every path carries signal.
  std::normal_distribution<float> noise(0, 0.3f);
  for (auto& w : model.weights()) {
    for (float& v : w) v += noise(rng);
  }
  Batch batch;
  batch.rows = 2;
  for (int i = 0; i < 10; ++i) {
    batch.tokens.push_back((i * 37 + 11) % 256);
    batch.labels.push_back((i * 91 + 3) % 256);
  }
  auto step = model.TrainStep(batch);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(step->predicted, 10);
  const std::vector<std::vector<float>> grads = model.grads();
  const float h = 1e-2f;
  for (size_t p = 0; p < model.params().size(); ++p) {
    std::vector<float>& w = model.weights()[p];
    const int64_t n = static_cast<int64_t>(w.size());
    for (int64_t s = 0; s < std::min<int64_t>(n, 12); ++s) {
      // The embeddings' rows of the tokens used, else spread over the tensor.
      int64_t i = (s * 7919) % n;
      if (p == 0) i = batch.tokens[s % 10] * 8 + s % 8;
      const float saved = w[i];
      w[i] = saved + h;
      const double up = model.Evaluate(batch)->loss;
      w[i] = saved - h;
      const double down = model.Evaluate(batch)->loss;
      w[i] = saved;
      const double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(grads[p][i], numeric, 2e-3 + 2e-2 * std::abs(numeric))
          << model.params()[p].name << "[" << i << "]";
    }
  }
}

}  // namespace
}  // namespace pstrain

namespace pstrain {
namespace {

TEST(GptModelTest, RecomputationGivesTheSameGradientsInLessMemory) {
  JobSpec job;
  job.mutable_model()->set_kind(GPT);
  GptSpec* gpt = job.mutable_model()->mutable_gpt();
  gpt->set_layers(4);
  gpt->set_heads(2);
  gpt->set_width(16);
  gpt->set_context(24);
  job.set_clocks(1);
  ApplyJobDefaults(&job);
  ASSERT_TRUE(ValidateJobSpec(job).ok()) << ValidateJobSpec(job);
  Batch batch;
  batch.rows = 3;
  for (int i = 0; i < 3 * 24; ++i) {
    batch.tokens.push_back((i * 37 + 11) % 256);
    batch.labels.push_back((i * 91 + 3) % 256);
  }
  auto stored_backend = kernels::MakeCpuBackend(1);
  auto recompute_backend = kernels::MakeCpuBackend(1);
  GptModel stored(job.model(), WholeModel(job.model()), stored_backend.get(), /*recompute=*/false);
  GptModel recomputed(job.model(), WholeModel(job.model()), recompute_backend.get(),
                      /*recompute=*/true);
  for (size_t p = 0; p < stored.params().size(); ++p) {
    for (int64_t i = 0; i < stored.params()[p].numel; ++i) {
      stored.weights()[p][i] = recomputed.weights()[p][i] = InitialValue(3, stored.params()[p], i);
    }
  }
  auto a = stored.TrainStep(batch);
  auto b = recomputed.TrainStep(batch);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->loss, b->loss);
  for (size_t p = 0; p < stored.params().size(); ++p) {
    EXPECT_EQ(stored.grads()[p], recomputed.grads()[p]) << stored.params()[p].name;
  }
  const int64_t peak_stored = stored_backend->peak_bytes();
  const int64_t peak_recomputed = recompute_backend->peak_bytes();
  std::printf("peak device memory: %lld bytes storing activations, %lld recomputing\n",
              static_cast<long long>(peak_stored), static_cast<long long>(peak_recomputed));
  EXPECT_LT(peak_recomputed, peak_stored);
}

TEST(ModelTest, SliceBatchCutsEveryField) {
  Batch b;
  b.rows = 3;
  b.x = {1, 2, 3, 4, 5, 6};
  b.labels = {7, 8, 9};
  const Batch s = SliceBatch(b, 1, 3);
  EXPECT_EQ(s.rows, 2);
  EXPECT_EQ(s.x, (std::vector<float>{3, 4, 5, 6}));
  EXPECT_EQ(s.labels, (std::vector<int32_t>{8, 9}));
  EXPECT_TRUE(s.tokens.empty());
}

}  // namespace
}  // namespace pstrain
