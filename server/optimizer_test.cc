// Each optimizer against its update formulas worked out by hand for three
// steps on a two-element tensor, with weight decay.
#include "server/optimizer.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

constexpr float kTol = 1e-6f;

std::unique_ptr<Optimizer> Make(const std::string& text_type, OptimizerSpec spec) {
  auto opt = MakeOptimizer(spec);
  EXPECT_TRUE(opt.ok()) << text_type;
  return std::move(opt).value();
}

// The same gradients for every optimizer: step t uses g = {0.5, -1} * t.
std::vector<float> Grad(int t) { return {0.5f * t, -1.0f * t}; }

TEST(OptimizerTest, Sgd) {
  OptimizerSpec spec;
  spec.set_type(SGD);
  spec.set_learning_rate(0.1f);
  spec.set_weight_decay(0.01f);
  auto opt = Make("sgd", spec);
  EXPECT_EQ(opt->StateSlots(), 0);
  std::vector<float> w = {1.0f, 2.0f};
  double w0 = 1.0, w1 = 2.0;
  for (int t = 1; t <= 3; ++t) {
    opt->Update(w.data(), nullptr, Grad(t).data(), 2, t);
    w0 -= 0.1 * (0.5 * t + 0.01 * w0);
    w1 -= 0.1 * (-1.0 * t + 0.01 * w1);
  }
  // By hand: w0 = 1 -> 0.949 -> 0.848051 -> 0.697203
  EXPECT_NEAR(w[0], 0.697203, kTol);
  EXPECT_NEAR(w[0], w0, kTol);
  EXPECT_NEAR(w[1], w1, kTol);
}

TEST(OptimizerTest, Momentum) {
  OptimizerSpec spec;
  spec.set_type(MOMENTUM);
  spec.set_learning_rate(0.1f);
  spec.set_momentum(0.9f);
  spec.set_weight_decay(0.0f);
  auto opt = Make("momentum", spec);
  ASSERT_EQ(opt->StateSlots(), 1);
  std::vector<float> w = {1.0f, 2.0f}, state(2, 0.0f);
  for (int t = 1; t <= 3; ++t) opt->Update(w.data(), state.data(), Grad(t).data(), 2, t);
  // v1 = 0.5, v2 = 0.45 + 1 = 1.45, v3 = 1.305 + 1.5 = 2.805
  // w0 = 1 - 0.1 * (0.5 + 1.45 + 2.805) = 0.5245
  EXPECT_NEAR(state[0], 2.805f, kTol);
  EXPECT_NEAR(w[0], 0.5245f, kTol);
  // Element 1: v = -1, -2.9, -5.61; w = 2 + 0.1 * 9.51 = 2.951
  EXPECT_NEAR(state[1], -5.61f, kTol);
  EXPECT_NEAR(w[1], 2.951f, kTol);
}

TEST(OptimizerTest, AdamWithWeightDecay) {
  OptimizerSpec spec;
  spec.set_type(ADAM);
  spec.set_learning_rate(0.01f);
  spec.set_beta1(0.9f);
  spec.set_beta2(0.999f);
  spec.set_epsilon(1e-8f);
  spec.set_weight_decay(0.1f);
  auto opt = Make("adam", spec);
  ASSERT_EQ(opt->StateSlots(), 2);
  std::vector<float> w = {1.0f, 2.0f}, state(4, 0.0f);
  double ref_w[2] = {1.0, 2.0}, m[2] = {0, 0}, v[2] = {0, 0};
  for (int t = 1; t <= 3; ++t) {
    const std::vector<float> g = Grad(t);
    opt->Update(w.data(), state.data(), g.data(), 2, t);
    for (int i = 0; i < 2; ++i) {
      const double gi = g[i] + 0.1 * ref_w[i];
      m[i] = 0.9 * m[i] + 0.1 * gi;
      v[i] = 0.999 * v[i] + 0.001 * gi * gi;
      const double mhat = m[i] / (1 - std::pow(0.9, t));
      const double vhat = v[i] / (1 - std::pow(0.999, t));
      ref_w[i] -= 0.01 * mhat / (std::sqrt(vhat) + 1e-8);
    }
  }
  // By hand: step 1 has g' = 0.5 + 0.1 = 0.6, mhat = 0.6, vhat = 0.36, so
  // w0 = 1 - 0.01 * 0.6 / 0.6 = 0.99; step 2: g' = 1.099, m = 0.1639,
  // v = 0.00156744, w0 = 0.99 - 0.01 * 0.86263 / 0.88550 = 0.980258; step 3
  // likewise gives 0.970586.
  EXPECT_NEAR(w[0], 0.970586, 1e-5);
  EXPECT_NEAR(w[0], ref_w[0], 1e-6);
  EXPECT_NEAR(w[1], ref_w[1], 1e-6);
  EXPECT_NEAR(state[0], m[0], 1e-6);
  EXPECT_NEAR(state[2 + 1], v[1], 1e-6);
}

TEST(OptimizerTest, UnknownTypeIsRefused) {
  OptimizerSpec spec;
  EXPECT_EQ(MakeOptimizer(spec).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pstrain
