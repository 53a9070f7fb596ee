// UpdateRules: an update's optimizer and learning rate, the job's or with
// a push's hyperparameters (PushRequest.hyper).
#include "server/update_rules.h"

#include <vector>

#include "common/job_optimizer.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

OptimizerSpec Adam(float lr) {
  OptimizerSpec spec;
  spec.set_type(ADAM);
  spec.set_learning_rate(lr);
  spec.mutable_schedule()->set_type(STEP_DECAY);
  spec.mutable_schedule()->set_step_size(10);
  spec.mutable_schedule()->set_gamma(0.5f);
  ApplyOptimizerDefaults(&spec);
  return spec;
}

UpdateRules Rules(const OptimizerSpec& spec) {
  return UpdateRules(spec, 100, *MakeOptimizer(spec));
}

// One element's Adam update with `rule`, from w = 1 and zero state.
float Updated(const UpdateRules::Rule& rule, float g) {
  float w = 1.0f;
  std::vector<float> state(rule.optimizer->StateFloats({1, 1}), 0.0f);
  UpdateContext ctx;
  ctx.lr = rule.lr;
  rule.optimizer->Update(ctx, {1, 1}, &w, state.data(), &g, nullptr);
  return w;
}

TEST(UpdateRulesTest, WithoutHyperparametersTheJobsScheduleRules) {
  const UpdateRules rules = Rules(Adam(0.1f));
  EXPECT_FLOAT_EQ(rules.For(0, nullptr).lr, 0.1f);
  EXPECT_FLOAT_EQ(rules.For(25, nullptr).lr, 0.025f);
}

TEST(UpdateRulesTest, APushsLearningRateReplacesTheSchedule) {
  const UpdateRules rules = Rules(Adam(0.1f));
  OptimizerSpec hyper;
  hyper.set_learning_rate(0.3f);
  const UpdateRules::Rule rule = rules.For(25, &hyper);
  EXPECT_FLOAT_EQ(rule.lr, 0.3f);
  EXPECT_EQ(rule.optimizer, rules.For(25, nullptr).optimizer);  // the job's optimizer
}

TEST(UpdateRulesTest, OtherHyperparametersMakeTheirOwnOptimizer) {
  const UpdateRules rules = Rules(Adam(0.1f));
  OptimizerSpec hyper;
  hyper.set_weight_decay(0.5f);  // L2 added to the gradient: 0 + 0.5 * 1
  const UpdateRules::Rule decayed = rules.For(0, &hyper);
  EXPECT_NE(decayed.optimizer, rules.For(0, nullptr).optimizer);
  // Adam's first step moves by lr * sign(g'): g' = 0.5 with decay, -1 without.
  EXPECT_FLOAT_EQ(Updated(decayed, 0.0f), 0.9f);
  EXPECT_FLOAT_EQ(Updated(rules.For(0, nullptr), -1.0f), 1.1f);
  hyper.set_weight_decay(0.0f);  // set to zero: present, and the job's value
  EXPECT_FLOAT_EQ(Updated(rules.For(0, &hyper), 0.0f), 1.0f);
}

TEST(UpdateRulesTest, HyperparametersThatAreNotAScriptsAreRefused) {
  const OptimizerSpec job = Adam(0.1f);
  OptimizerSpec other;
  other.set_type(SGD);
  EXPECT_TRUE(absl::IsInvalidArgument(WithHyper(job, other).status()));
  OptimizerSpec clip;
  clip.set_clip_norm(1.0f);
  EXPECT_TRUE(absl::IsInvalidArgument(WithHyper(job, clip).status()));
  OptimizerSpec beta;
  beta.set_beta1(1.5f);
  const absl::Status bad = WithHyper(job, beta).status();
  EXPECT_TRUE(absl::IsInvalidArgument(bad));
  EXPECT_NE(bad.message().find("beta1"), std::string::npos) << bad;
  OptimizerSpec lr;
  lr.set_learning_rate(0.01f);
  lr.set_beta1(0.8f);
  absl::StatusOr<OptimizerSpec> merged = WithHyper(job, lr);
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_FLOAT_EQ(merged->beta1(), 0.8f);
  EXPECT_FLOAT_EQ(merged->beta2(), job.beta2());
  EXPECT_EQ(merged->schedule().type(), STEP_DECAY);
}

}  // namespace
}  // namespace pstrain
