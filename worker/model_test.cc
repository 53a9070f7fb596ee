// The model's gradients against central finite differences of its loss.
#include "worker/model.h"

#include <cmath>
#include <random>

#include "common/job_spec.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

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
  Model model(job.model(), backend.get());
  ASSERT_EQ(model.params().size(), 4u);
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> u(-1, 1);
  for (size_t p = 0; p < model.params().size(); ++p) {
    for (float& w : model.weights()[p]) w = u(rng);
  }
  const int rows = 6;
  std::vector<float> x(rows * 5);
  for (float& v : x) v = u(rng);
  const std::vector<int32_t> y = {0, 1, 2, 2, 1, 0};
  ASSERT_TRUE(model.TrainStep(x.data(), y.data(), rows).ok());
  const std::vector<std::vector<float>> grads = model.grads();

  const float h = 1e-3f;
  for (size_t p = 0; p < model.params().size(); ++p) {
    for (size_t i = 0; i < model.weights()[p].size(); ++i) {
      float& w = model.weights()[p][i];
      const float saved = w;
      w = saved + h;
      const double up = model.Evaluate(x.data(), y.data(), rows)->loss;
      w = saved - h;
      const double down = model.Evaluate(x.data(), y.data(), rows)->loss;
      w = saved;
      const double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(grads[p][i], numeric, 2e-3 + 1e-2 * std::abs(numeric))
          << model.params()[p].name << "[" << i << "]";
    }
  }
}

}  // namespace
}  // namespace pstrain
