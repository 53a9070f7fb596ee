// The CPU backend's element-wise loops against their plain definitions:
// exact where they only reorder nothing (ReLU, bias, sums, axpy), within
// the stated error for GELU (an exp of its own).
#include "kernels/cpu/cpu_loops.h"

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

bool SameBits(float a, float b) {
  return std::memcmp(&a, &b, sizeof(a)) == 0;
}

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
  SumRows(rows, cols, dy.data(), db.data());
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
  for (float far : {15.0f, 30.0f, 100.0f, 1e4f, 1e30f}) {
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

}  // namespace
}  // namespace cpu
}  // namespace kernels
}  // namespace pstrain
