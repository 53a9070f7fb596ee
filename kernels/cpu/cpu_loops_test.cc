// The CPU backend's element-wise loops against their plain definitions:
// exact where they only reorder nothing (ReLU, bias, sums, axpy), within
// the stated error for GELU (an exp of its own).
#include "kernels/cpu/cpu_loops.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace kernels {
namespace cpu {
namespace {

std::vector<float> Random(size_t n, unsigned seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Odd lengths (a vector tail) and the values a branch-free select must get right.
std::vector<float> WithSpecials(std::vector<float> v) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float s : {0.0f, -0.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN(), 1e-40f}) {
    v.push_back(s);
  }
  return v;
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(a)) == 0; }

TEST(CpuLoopsTest, ReluIsTheSelectBothWaysAndInPlace) {
  const std::vector<float> x = WithSpecials(Random(1001, 1, 3.0f));
  const std::vector<float> dy = WithSpecials(Random(1001, 2, 1.0f));
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> y(n), in_place = x, dx(n), d_in_place = dy;
  Relu(n, x.data(), y.data());
  Relu(n, in_place.data(), in_place.data());
  ReluBackward(n, y.data(), dy.data(), dx.data());
  ReluBackward(n, y.data(), d_in_place.data(), d_in_place.data());
  for (int64_t i = 0; i < n; ++i) {
    const float want = x[i] > 0.0f ? x[i] : 0.0f;
    EXPECT_TRUE(SameBits(y[i], want)) << i << ": " << y[i] << " for " << x[i];
    EXPECT_TRUE(SameBits(in_place[i], want)) << i;
    const float dwant = y[i] > 0.0f ? dy[i] : 0.0f;
    EXPECT_TRUE(SameBits(dx[i], dwant)) << i;
    EXPECT_TRUE(SameBits(d_in_place[i], dwant)) << i;
  }
}

TEST(CpuLoopsTest, BiasSumsAndAxpyAddInThePlainLoopsOrder) {
  const int rows = 13, cols = 37;
  const std::vector<float> dy = Random(rows * cols, 3, 5.0f), bias = Random(cols, 4, 1.0f);
  std::vector<float> db(cols, 7.0f), y = dy;
  SumRows(rows, cols, cols, dy.data(), db.data());
  AddBias(rows, cols, bias.data(), y.data());
  for (int j = 0; j < cols; ++j) {
    float want = 0.0f;
    for (int r = 0; r < rows; ++r) want += dy[r * cols + j];
    EXPECT_TRUE(SameBits(db[j], want)) << j;
    for (int r = 0; r < rows; ++r) {
      EXPECT_TRUE(SameBits(y[r * cols + j], dy[r * cols + j] + bias[j])) << r << "," << j;
    }
  }
  std::vector<float> a = Random(1001, 5, 2.0f), b = Random(1001, 6, 2.0f), scaled = a;
  const std::vector<float> b0 = b;
  Axpy(1001, 0.37f, a.data(), b.data());
  Scale(1001, -1.9f, scaled.data());
  for (int i = 0; i < 1001; ++i) {
    const float product = 0.37f * a[i];  // rounded before the add: no fused multiply-add
    EXPECT_TRUE(SameBits(b[i], b0[i] + product)) << i;
    EXPECT_TRUE(SameBits(scaled[i], a[i] * -1.9f)) << i;
  }
}

double GeluDefinition(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

double GeluDerivative(double x) {
  const double c = std::sqrt(2 / M_PI), u = c * (x + 0.044715 * x * x * x);
  const double t = std::tanh(u);
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x);
}

TEST(CpuLoopsTest, GeluAndItsGradientWithinTheStatedErrorEverywhere) {
  std::vector<float> x;
  for (int i = -200000; i <= 200000; ++i) x.push_back(i * 6e-5f);  // [-12, 12]
  for (float far : {15.0f, 30.0f, 100.0f, 1e4f, 1e30f, 1e38f, std::numeric_limits<float>::max()}) {
    x.push_back(far);
    x.push_back(-far);
  }
  const int64_t n = static_cast<int64_t>(x.size());
  const std::vector<float> dy(n, 1.0f);
  std::vector<float> y(n), dx(n), d_in_place = dy, in_place = x;
  Gelu(n, x.data(), y.data());
  Gelu(n, in_place.data(), in_place.data());
  GeluBackward(n, x.data(), dy.data(), dx.data());
  GeluBackward(n, x.data(), d_in_place.data(), d_in_place.data());
  double worst = 0, worst_grad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double want = GeluDefinition(x[i]), grad = GeluDerivative(x[i]);
    const double error = std::abs(y[i] - want) / (1e-6 + 2e-6 * std::abs(want));
    const double grad_error = std::abs(dx[i] - grad) / (1e-6 + 2e-6 * std::abs(grad));
    worst = std::max(worst, error);
    worst_grad = std::max(worst_grad, grad_error);
    ASSERT_LE(error, 1.0) << "GELU(" << x[i] << ") = " << y[i] << ", not " << want;
    ASSERT_LE(grad_error, 1.0) << "GELU'(" << x[i] << ") = " << dx[i] << ", not " << grad;
    ASSERT_TRUE(SameBits(in_place[i], y[i])) << i;
    ASSERT_TRUE(SameBits(d_in_place[i], dx[i])) << i;
  }
  std::printf("worst error over the bound: GELU %.3f, its gradient %.3f\n", worst, worst_grad);
}

TEST(CpuLoopsTest, ExpSumIsExpWithinAFewUlpsAndMaxIsExact) {
  std::vector<float> x;
  for (int i = 0; i <= 90000; ++i) x.push_back(-i * 1e-3f);  // [-90, 0]
  const int n = static_cast<int>(x.size());
  EXPECT_EQ(Max(n, x.data()), 0.0f);
  std::vector<float> shifted = Random(1003, 7, 50.0f);
  shifted[517] = 60.0f;
  EXPECT_EQ(Max(1003, shifted.data()), 60.0f);
  std::vector<float> e(n), in_place = x;
  const float sum = ExpSum(n, x.data(), 0.0f, e.data());
  const float sum_in_place = ExpSum(n, in_place.data(), 0.0f, in_place.data());
  double want_sum = 0, worst_ulps = 0;
  for (int i = 0; i < n; ++i) {
    const double want = std::exp(static_cast<double>(x[i]));
    want_sum += std::max(want, std::exp(-87.0));
    if (x[i] < -87.0f) {
      EXPECT_NEAR(e[i], std::exp(-87.0), 1e-44) << x[i];  // the clamp
      continue;
    }
    const double ulps = std::abs(e[i] - want) / (want * std::numeric_limits<float>::epsilon());
    worst_ulps = std::max(worst_ulps, ulps);
    ASSERT_LE(ulps, 4.0) << "e^" << x[i] << " = " << e[i] << ", not " << want;
    ASSERT_TRUE(SameBits(in_place[i], e[i])) << i;
  }
  EXPECT_NEAR(sum, want_sum, 1e-5 * want_sum);  // 90,001 terms added in float
  EXPECT_EQ(sum, sum_in_place);
  std::printf("worst exp error %.2f ulp\n", worst_ulps);
}

TEST(CpuLoopsTest, SoftmaxBackwardAndLayerNormMatchTheirDefinitions) {
  const int dim = 77;
  std::vector<float> a = Random(dim, 8, 1.0f), d = Random(dim, 9, 1.0f);
  for (float& v : a) v = std::abs(v);
  const std::vector<float> d0 = d;
  const float dot = 0.375f;  // as attention's backward has it, from the output
  SoftmaxBackwardGiven(dim, a.data(), dot, d.data());
  for (int j = 0; j < dim; ++j) EXPECT_NEAR(d[j], a[j] * (d0[j] - dot), 1e-6) << j;

  const int rows = 3;
  const std::vector<float> x = Random(rows * dim, 10, 3.0f), gamma = Random(dim, 11, 1.0f),
                           beta = Random(dim, 12, 1.0f), dy = Random(rows * dim, 13, 1.0f);
  std::vector<float> y(rows * dim), mean(rows), rstd(rows), dx(rows * dim), dgamma(dim, 9.0f),
      dbeta(dim, 9.0f);
  LayerNorm(rows, dim, x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data());
  LayerNormBackwardRows(rows, dim, x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(),
                        dx.data());
  // Two column ranges, as two threads would take them.
  LayerNormParamGrads(rows, dim, 0, 40, x.data(), mean.data(), rstd.data(), dy.data(),
                      dgamma.data(), dbeta.data());
  LayerNormParamGrads(rows, dim, 40, dim, x.data(), mean.data(), rstd.data(), dy.data(),
                      dgamma.data(), dbeta.data());
  std::vector<double> want_dgamma(dim, 0), want_dbeta(dim, 0);
  for (int r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * dim;
    double m = 0, v = 0;
    for (int j = 0; j < dim; ++j) m += xr[j];
    m /= dim;
    for (int j = 0; j < dim; ++j) v += (xr[j] - m) * (xr[j] - m);
    v /= dim;
    const double s = 1 / std::sqrt(v + 1e-5);
    EXPECT_NEAR(mean[r], m, 1e-6);
    EXPECT_NEAR(rstd[r], s, 1e-6 * s);
    double mean_g = 0, mean_gx = 0;
    for (int j = 0; j < dim; ++j) {
      const double xhat = (xr[j] - m) * s, g = dy[r * dim + j] * gamma[j];
      EXPECT_NEAR(y[r * dim + j], xhat * gamma[j] + beta[j], 1e-5);
      mean_g += g / dim;
      mean_gx += g * xhat / dim;
      want_dgamma[j] += dy[r * dim + j] * xhat;
      want_dbeta[j] += dy[r * dim + j];
    }
    for (int j = 0; j < dim; ++j) {
      const double xhat = (xr[j] - m) * s;
      const double want = s * (dy[r * dim + j] * gamma[j] - mean_g - xhat * mean_gx);
      EXPECT_NEAR(dx[r * dim + j], want, 1e-5 * (1 + std::abs(want))) << r << "," << j;
    }
  }
  for (int j = 0; j < dim; ++j) {
    EXPECT_NEAR(dgamma[j], want_dgamma[j], 1e-5) << j;
    EXPECT_NEAR(dbeta[j], want_dbeta[j], 1e-5) << j;
  }
}

}  // namespace
}  // namespace cpu
}  // namespace kernels
}  // namespace pstrain
