// GradientAccumulator: micro-batch means weighted by their rows add up to
// the whole batch's mean gradient and loss (what one step over the batch
// computes), with the arithmetic checked by hand first.
#include "worker/gradient_accumulator.h"

#include <memory>

#include "common/job_spec.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace pstrain {
namespace {

TEST(GradientAccumulatorTest, AddsGradientsWeightedByTheirShare) {
  std::vector<ParamInfo> params(2);
  params[0].numel = 2;
  params[1].numel = 1;
  GradientAccumulator acc;
  acc.Reset(params);
  acc.Add({{1, 2}, {4}}, 0.25f);
  acc.Add({{3, 4}, {8}}, 0.75f);
  EXPECT_EQ(acc.sum(), (ParamBuffers{{2.5f, 3.5f}, {7.0f}}));
  acc.Reset(params);  // the next clock starts from zero
  EXPECT_EQ(acc.sum(), (ParamBuffers{{0, 0}, {0}}));
}

// A dense layer over five features into three classes, and a batch of
// seven rows (micro-batches of unequal rows).
class MicroBatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    JobSpec job = ParseJobSpecText(
                      "data { dataset: SYNTHETIC synthetic_dim: 5 synthetic_classes: 3 } "
                      "model { layers { type: DENSE units: 3 } layers { type: SOFTMAX_XENT } } "
                      "batch_size: 7 num_servers: 1 num_workers: 1",
                      "t")
                      .value();
    ApplyJobDefaults(&job);
    model_ = MakeModel(job.model(), backend_.get());
    for (size_t p = 0; p < model_->params().size(); ++p) {
      for (size_t i = 0; i < model_->weights()[p].size(); ++i) {
        model_->weights()[p][i] = 0.01f * static_cast<float>((i * 7 + p) % 11) - 0.05f;
      }
    }
    batch_.rows = 7;
    for (int r = 0; r < 7; ++r) {
      for (int f = 0; f < 5; ++f) batch_.x.push_back(0.1f * static_cast<float>((r + 2 * f) % 5));
      batch_.labels.push_back(r % 3);
    }
  }

  std::unique_ptr<kernels::Backend> backend_ = kernels::MakeCpuBackend(1);
  std::unique_ptr<Model> model_;
  Batch batch_;
};

TEST_F(MicroBatchTest, MicroBatchesAddUpToTheWholeBatchsStep) {
  const StepResult whole = model_->TrainStep(batch_).value();
  const ParamBuffers expected = model_->grads();
  for (int k : {2, 3, 7}) {
    GradientAccumulator acc;
    const StepResult r = acc.Train(*model_, batch_, k).value();
    EXPECT_NEAR(r.loss, whole.loss, 1e-5) << k;
    EXPECT_EQ(r.correct, whole.correct) << k;
    EXPECT_EQ(r.predicted, whole.predicted) << k;
    ASSERT_EQ(acc.sum().size(), expected.size());
    for (size_t p = 0; p < expected.size(); ++p) {
      ASSERT_EQ(acc.sum()[p].size(), expected[p].size());
      for (size_t i = 0; i < expected[p].size(); ++i) {
        EXPECT_NEAR(acc.sum()[p][i], expected[p][i], 1e-5) << "k " << k << " param " << p;
      }
    }
  }
}

}  // namespace
}  // namespace pstrain
