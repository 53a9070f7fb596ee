// Each optimizer against its update formulas, written out again here in
// double precision, for three steps on small tensors, with a warm-up schedule
// and weight decay; plus the schedules themselves and the thread split.
#include "server/optimizer.h"

#include <cmath>
#include <functional>
#include <vector>

#include "common/job_spec.h"
#include "gtest/gtest.h"
#include "server/lr_schedule.h"

namespace pstrain {
namespace {

constexpr int kSteps = 3;
constexpr double kWd = 0.1;

// A 2 x 3 chunk: gradients differ in sign and size per element and step.
const ChunkShape kShape{2, 3};
double Grad(int t, int i) { return (i % 2 ? -1.0 : 1.0) * (0.3 + 0.2 * i) * t; }
double Weight0(int i) { return 0.5 - 0.25 * i; }

OptimizerSpec Spec(OptimizerType type) {
  JobSpec job;
  OptimizerSpec* opt = job.mutable_optimizer();
  opt->set_type(type);
  opt->set_learning_rate(0.05f);
  opt->set_weight_decay(static_cast<float>(kWd));
  opt->mutable_schedule()->set_type(WARMUP_COSINE);
  opt->mutable_schedule()->set_warmup_clocks(4);
  ApplyJobDefaults(&job);
  return job.optimizer();
}

// The warm-up by hand: clock t (0-based) has lr * (t + 1) / 4.
double Lr(int t) { return 0.05 * (t + 1) / 4.0; }

// Runs kSteps updates; returns the weights and the state.
std::pair<std::vector<float>, std::vector<float>> RunSteps(const OptimizerSpec& spec,
                                                           const ChunkShape& shape,
                                                           ThreadPool* pool = nullptr) {
  auto opt = MakeOptimizer(spec).value();
  const Schedule schedule(spec, 100);
  const int64_t n = shape.numel();
  std::vector<float> w(n), state(opt->StateFloats(shape), 0.0f), g(n);
  for (int i = 0; i < n; ++i) w[i] = static_cast<float>(Weight0(i % 6));
  for (int t = 1; t <= kSteps; ++t) {
    for (int i = 0; i < n; ++i) g[i] = static_cast<float>(Grad(t, i % 6));
    UpdateContext ctx;
    ctx.step = t;
    ctx.lr = schedule.At(t - 1);
    EXPECT_NEAR(ctx.lr, Lr(t - 1), 1e-8);
    opt->Update(ctx, shape, w.data(), state.data(), g.data(), pool);
  }
  return {w, state};
}

// The reference: per element, state `s` (zeros), returns the weights after
// kSteps of `step(t, lr, g, w, s)`.
std::vector<double> Reference(
    int arrays,
    const std::function<void(int, double, double, double&, std::vector<double>&)>& step) {
  std::vector<double> out;
  for (int i = 0; i < kShape.numel(); ++i) {
    double w = Weight0(i);
    std::vector<double> s(arrays, 0.0);
    for (int t = 1; t <= kSteps; ++t) step(t, Lr(t - 1), Grad(t, i), w, s);
    out.push_back(w);
  }
  return out;
}

void ExpectNear(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

TEST(OptimizerTest, Sgd) {
  const auto [w, state] = RunSteps(Spec(SGD), kShape);
  EXPECT_TRUE(state.empty());
  ExpectNear(
      w, Reference(0, [](int, double lr, double g, double& w, auto&) { w -= lr * (g + kWd * w); }),
      1e-6);
  // Element 0 by hand: 0.5 -> 0.5 - 0.0125 * (0.3 + 0.05) = 0.495625
  //   -> - 0.025 * (0.6 + 0.0495625) = 0.4793859 -> - 0.0375 * (0.9 + 0.0479386) = 0.4438382
  EXPECT_NEAR(w[0], 0.4438382, 1e-6);
}

TEST(OptimizerTest, Momentum) {
  const auto [w, state] = RunSteps(Spec(MOMENTUM), kShape);
  EXPECT_EQ(state.size(), 6u + kArrayGap);  // one array, then a gap
  ExpectNear(w,
             Reference(1,
                       [](int, double lr, double g, double& w, auto& s) {
                         const double gp = g + kWd * w;
                         s[0] = 0.9 * s[0] + gp;
                         w -= lr * s[0];
                       }),
             1e-6);
}

TEST(OptimizerTest, Nesterov) {
  const auto [w, state] = RunSteps(Spec(NESTEROV), kShape);
  EXPECT_EQ(state.size(), 6u + kArrayGap);  // one array, then a gap
  ExpectNear(w,
             Reference(1,
                       [](int, double lr, double g, double& w, auto& s) {
                         const double gp = g + kWd * w;
                         s[0] = 0.9 * s[0] + gp;
                         w -= lr * (gp + 0.9 * s[0]);
                       }),
             1e-6);
}

TEST(OptimizerTest, Adagrad) {
  const auto [w, state] = RunSteps(Spec(ADAGRAD), kShape);
  ExpectNear(w,
             Reference(1,
                       [](int, double lr, double g, double& w, auto& s) {
                         const double gp = g + kWd * w;
                         s[0] += gp * gp;
                         w -= lr * gp / (std::sqrt(s[0]) + 1e-10);
                       }),
             1e-6);
}

TEST(OptimizerTest, RmsProp) {
  const auto [w, state] = RunSteps(Spec(RMSPROP), kShape);
  ExpectNear(w,
             Reference(1,
                       [](int, double lr, double g, double& w, auto& s) {
                         const double gp = g + kWd * w;
                         s[0] = 0.9 * s[0] + 0.1 * gp * gp;
                         w -= lr * gp / (std::sqrt(s[0]) + 1e-8);
                       }),
             1e-6);
}

TEST(OptimizerTest, Adadelta) {
  const auto [w, state] = RunSteps(Spec(ADADELTA), kShape);
  EXPECT_EQ(state.size(), 2 * (6u + kArrayGap));  // two arrays, a gap after each
  // lr defaults to 1 for Adadelta; the spec above sets 0.05, as the formula allows.
  ExpectNear(w,
             Reference(2,
                       [](int, double lr, double g, double& w, auto& s) {
                         const double gp = g + kWd * w;
                         s[0] = 0.9 * s[0] + 0.1 * gp * gp;
                         const double d = std::sqrt(s[1] + 1e-6) / std::sqrt(s[0] + 1e-6) * gp;
                         s[1] = 0.9 * s[1] + 0.1 * d * d;
                         w -= lr * d;
                       }),
             1e-6);
}

TEST(OptimizerTest, Adam) {
  const auto [w, state] = RunSteps(Spec(ADAM), kShape);
  EXPECT_EQ(state.size(), 2 * (6u + kArrayGap));  // two arrays, a gap after each
  ExpectNear(w,
             Reference(2,
                       [](int t, double lr, double g, double& w, auto& s) {
                         const double gp = g + kWd * w;
                         s[0] = 0.9 * s[0] + 0.1 * gp;
                         s[1] = 0.999 * s[1] + 0.001 * gp * gp;
                         const double mhat = s[0] / (1 - std::pow(0.9, t));
                         const double vhat = s[1] / (1 - std::pow(0.999, t));
                         w -= lr * mhat / (std::sqrt(vhat) + 1e-8);
                       }),
             1e-6);
  // Step 1 by hand: mhat = g', vhat = g'^2, so w0 = 0.5 - 0.0125 = 0.4875.
}

TEST(OptimizerTest, AdamW) {
  const auto [w, state] = RunSteps(Spec(ADAMW), kShape);
  ExpectNear(w,
             Reference(2,
                       [](int t, double lr, double g, double& w, auto& s) {
                         s[0] = 0.9 * s[0] + 0.1 * g;
                         s[1] = 0.999 * s[1] + 0.001 * g * g;
                         const double mhat = s[0] / (1 - std::pow(0.9, t));
                         const double vhat = s[1] / (1 - std::pow(0.999, t));
                         w -= lr * (mhat / (std::sqrt(vhat) + 1e-8) + kWd * w);
                       }),
             1e-6);
}

// Lion: one state array (4 bytes a parameter), the sign of the
// interpolated momentum, decoupled weight decay; beta2 defaults to 0.99.
TEST(OptimizerTest, Lion) {
  EXPECT_FLOAT_EQ(Spec(LION).beta2(), 0.99f);
  const auto [w, state] = RunSteps(Spec(LION), kShape);
  EXPECT_EQ(state.size(), 6u + kArrayGap);  // one array, then a gap
  auto sign = [](double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0; };
  ExpectNear(w,
             Reference(1,
                       [&](int, double lr, double g, double& w, auto& s) {
                         w -= lr * (sign(0.9 * s[0] + 0.1 * g) + kWd * w);
                         s[0] = 0.99 * s[0] + 0.01 * g;
                       }),
             1e-6);
  // Element 0 by hand, g = 0.3t > 0 throughout: w -= lr * (1 + 0.1 w) three
  // times: 0.5 -> 0.4868750 -> 0.4606578 -> 0.4214303.
  EXPECT_NEAR(w[0], 0.4214303, 1e-6);
  // The momentum after three steps: 0.01 * (0.3 * 0.99^2 + 0.6 * 0.99 + 0.9).
  EXPECT_NEAR(state[0], 0.01 * (0.3 * 0.9801 + 0.6 * 0.99 + 0.9), 1e-7);
  // A zero gradient on a zero momentum moves a weight only by its decay.
  OptimizerSpec spec = Spec(LION);
  auto lion = MakeOptimizer(spec).value();
  std::vector<float> w1 = {2.0f}, m1(1 + kArrayGap, 0.0f), g1 = {0.0f};
  UpdateContext ctx;
  ctx.lr = 0.5f;
  lion->Update(ctx, ChunkShape{1, 1}, w1.data(), m1.data(), g1.data(), nullptr);
  EXPECT_FLOAT_EQ(w1[0], 2.0f - 0.5f * 0.1f * 2.0f);
}

// Adafactor on a vector: per-element second moments.
TEST(OptimizerTest, AdafactorVector) {
  const ChunkShape vec{1, 6};
  const auto [w, state] = RunSteps(Spec(ADAFACTOR), vec);
  EXPECT_EQ(state.size(), 6u);  // not elementwise: no gaps
  std::vector<double> ref_w(6), v(6, 0.0);
  for (int i = 0; i < 6; ++i) ref_w[i] = Weight0(i);
  for (int t = 1; t <= kSteps; ++t) {
    const double b = 1 - std::pow(t, -0.8);
    std::vector<double> u(6);
    double sq = 0;
    for (int i = 0; i < 6; ++i) {
      const double g = Grad(t, i);
      v[i] = b * v[i] + (1 - b) * (g * g + 1e-30);
      u[i] = g / std::sqrt(v[i]);
      sq += u[i] * u[i];
    }
    const double scale = std::max(1.0, std::sqrt(sq / 6) / 1.0);
    for (int i = 0; i < 6; ++i) ref_w[i] -= Lr(t - 1) * (u[i] / scale + kWd * ref_w[i]);
  }
  ExpectNear(w, ref_w, 1e-6);
  // Step 1 has b = 0, so v = g^2, u = sign(g), rms 1: w0 = 0.5 - 0.0125 * (1 + 0.05).
}

// Adafactor on a 2 x 3 matrix: row and column statistics.
TEST(OptimizerTest, AdafactorMatrix) {
  const auto [w, state] = RunSteps(Spec(ADAFACTOR), kShape);
  ASSERT_EQ(state.size(), 5u);  // 2 rows + 3 columns instead of 6
  const int rows = 2, cols = 3;
  std::vector<double> ref_w(6), r(rows, 0.0), c(cols, 0.0);
  for (int i = 0; i < 6; ++i) ref_w[i] = Weight0(i);
  for (int t = 1; t <= kSteps; ++t) {
    const double b = 1 - std::pow(t, -0.8);
    auto G = [&](int i, int j) {
      const double g = Grad(t, i * cols + j);
      return g * g + 1e-30;
    };
    for (int i = 0; i < rows; ++i) {
      double mean = 0;
      for (int j = 0; j < cols; ++j) mean += G(i, j) / cols;
      r[i] = b * r[i] + (1 - b) * mean;
    }
    for (int j = 0; j < cols; ++j) {
      double mean = 0;
      for (int i = 0; i < rows; ++i) mean += G(i, j) / rows;
      c[j] = b * c[j] + (1 - b) * mean;
    }
    const double r_mean = (r[0] + r[1]) / 2;
    std::vector<double> u(6);
    double sq = 0;
    for (int i = 0; i < rows; ++i) {
      for (int j = 0; j < cols; ++j) {
        const double vhat = r[i] * c[j] / r_mean;
        u[i * cols + j] = Grad(t, i * cols + j) / std::sqrt(vhat);
        sq += u[i * cols + j] * u[i * cols + j];
      }
    }
    const double scale = std::max(1.0, std::sqrt(sq / 6));
    for (int k = 0; k < 6; ++k) ref_w[k] -= Lr(t - 1) * (u[k] / scale + kWd * ref_w[k]);
  }
  ExpectNear(w, ref_w, 1e-6);
  EXPECT_NEAR(state[0], r[0], 1e-6 * r[0]);
  EXPECT_NEAR(state[2 + 2], c[2], 1e-6 * c[2]);
}

// A chunk split over threads gives the serial result.
TEST(OptimizerTest, ThreadsGiveTheSerialResult) {
  ThreadPool pool(3);
  for (OptimizerType type :
       {SGD, MOMENTUM, NESTEROV, ADAGRAD, RMSPROP, ADADELTA, ADAM, ADAMW, ADAFACTOR, LION}) {
    // Large enough to be split (kMinUpdateGrain elements a part).
    for (const ChunkShape shape : {ChunkShape{1, 3 << 20}, ChunkShape{3000, 1000}}) {
      const auto serial = RunSteps(Spec(type), shape);
      const auto threaded = RunSteps(Spec(type), shape, &pool);
      for (size_t i = 0; i < serial.first.size(); ++i) {
        ASSERT_NEAR(serial.first[i], threaded.first[i], 1e-6) << OptimizerType_Name(type);
      }
    }
  }
}

TEST(ScheduleTest, Formulas) {
  JobSpec job;
  OptimizerSpec* opt = job.mutable_optimizer();
  opt->set_learning_rate(1.0f);
  opt->mutable_schedule()->set_type(WARMUP_COSINE);
  opt->mutable_schedule()->set_warmup_clocks(10);
  opt->mutable_schedule()->set_min_lr(0.1f);
  ApplyJobDefaults(&job);
  const Schedule cosine(job.optimizer(), 110);  // decays over the 100 clocks after warm-up
  EXPECT_FLOAT_EQ(cosine.At(0), 0.1f);
  EXPECT_FLOAT_EQ(cosine.At(9), 1.0f);
  EXPECT_FLOAT_EQ(cosine.At(10), 1.0f);
  EXPECT_NEAR(cosine.At(60), 0.55f, 1e-6);  // halfway: 0.1 + 0.9 * 0.5
  EXPECT_NEAR(cosine.At(110), 0.1f, 1e-6);
  EXPECT_NEAR(cosine.At(500), 0.1f, 1e-6);

  opt->mutable_schedule()->set_type(STEP_DECAY);
  opt->mutable_schedule()->set_step_size(30);
  opt->mutable_schedule()->set_gamma(0.5f);
  const Schedule step(job.optimizer(), 110);
  EXPECT_FLOAT_EQ(step.At(29), 1.0f);
  EXPECT_FLOAT_EQ(step.At(30), 0.5f);
  EXPECT_FLOAT_EQ(step.At(95), 0.125f);

  opt->mutable_schedule()->set_type(CONSTANT);
  EXPECT_FLOAT_EQ(Schedule(job.optimizer(), 110).At(77), 1.0f);
}

TEST(OptimizerTest, BadSpecsAreRefused) {
  OptimizerSpec spec;
  spec.set_type(static_cast<OptimizerType>(99));
  EXPECT_EQ(MakeOptimizer(spec).status().code(), absl::StatusCode::kInvalidArgument);
  JobSpec job;
  job.mutable_optimizer()->mutable_schedule()->set_type(STEP_DECAY);  // no step_size
  ApplyJobDefaults(&job);
  EXPECT_NE(ValidateJobSpec(job).message().find("step_size"), absl::string_view::npos)
      << ValidateJobSpec(job);
}

}  // namespace
}  // namespace pstrain
