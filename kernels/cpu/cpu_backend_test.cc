// Each CPU kernel against a naive loop on random inputs.
#include "kernels/cpu/cpu_backend.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace kernels {
namespace {

std::vector<float> Random(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

void ExpectClose(const std::vector<float>& got, const std::vector<double>& want, double eps) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-5 + std::abs(want[i]) * eps) << "at " << i;
  }
}

TEST(CpuBackendTest, GemmAllTranspositions) {
  auto b = MakeCpuBackend(1);
  std::mt19937 rng(1);
  const int m = 7, n = 5, k = 9;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const std::vector<float> A = Random(m * k, rng), B = Random(k * n, rng);
      std::vector<float> C = Random(m * n, rng);
      std::vector<double> want(m * n);
      for (int i = 0; i < m; ++i) {
        for (int j = 0; j < n; ++j) {
          double s = 0;
          for (int p = 0; p < k; ++p) {
            const float a = ta ? A[p * m + i] : A[i * k + p];
            const float bb = tb ? B[j * k + p] : B[p * n + j];
            s += double(a) * bb;
          }
          want[i * n + j] = 0.5 * s + 2.0 * C[i * n + j];
        }
      }
      b->Gemm(ta, tb, m, n, k, 0.5f, A.data(), B.data(), 2.0f, C.data());
      ExpectClose(C, want, 1e-5);
    }
  }
}

TEST(CpuBackendTest, BiasAndRelu) {
  auto b = MakeCpuBackend(1);
  std::mt19937 rng(2);
  const int rows = 6, cols = 4;
  std::vector<float> y = Random(rows * cols, rng), bias = Random(cols, rng);
  std::vector<double> want(rows * cols);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) want[r * cols + c] = y[r * cols + c] + bias[c];
  }
  b->AddBias(rows, cols, bias.data(), y.data());
  ExpectClose(y, want, 1e-6);

  std::vector<float> db(cols);
  std::vector<double> want_db(cols, 0);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) want_db[c] += y[r * cols + c];
  }
  b->BiasGrad(rows, cols, y.data(), db.data());
  ExpectClose(db, want_db, 1e-6);

  std::vector<float> out(y.size()), dy = Random(y.size(), rng), dx(y.size());
  b->ReluForward(y.size(), y.data(), out.data());
  b->ReluBackward(y.size(), out.data(), dy.data(), dx.data());
  for (size_t i = 0; i < y.size(); ++i) {
    EXPECT_EQ(out[i], y[i] > 0 ? y[i] : 0.0f);
    EXPECT_EQ(dx[i], y[i] > 0 ? dy[i] : 0.0f);
  }
}

TEST(CpuBackendTest, SoftmaxXent) {
  auto b = MakeCpuBackend(1);
  std::mt19937 rng(3);
  const int rows = 5, classes = 4;
  std::vector<float> z = Random(rows * classes, rng);
  z[0] = 80.0f;  // large logits stay finite
  const std::vector<int32_t> labels = {0, 3, 1, 2, 3};
  std::vector<float> d(rows * classes);
  int correct = -1;
  const float loss = b->SoftmaxXent(rows, classes, z.data(), labels.data(), d.data(), &correct);
  double want_loss = 0;
  int want_correct = 0;
  std::vector<double> want_d(rows * classes);
  for (int r = 0; r < rows; ++r) {
    double mx = -1e30, sum = 0;
    int arg = 0;
    for (int c = 0; c < classes; ++c) {
      if (z[r * classes + c] > mx) { mx = z[r * classes + c]; arg = c; }
    }
    for (int c = 0; c < classes; ++c) sum += std::exp(z[r * classes + c] - mx);
    want_loss += -(z[r * classes + labels[r]] - mx - std::log(sum));
    want_correct += arg == labels[r];
    for (int c = 0; c < classes; ++c) {
      want_d[r * classes + c] =
          (std::exp(z[r * classes + c] - mx) / sum - (c == labels[r])) / rows;
    }
  }
  EXPECT_NEAR(loss, want_loss / rows, 1e-5);
  EXPECT_EQ(correct, want_correct);
  ExpectClose(d, want_d, 1e-5);
  EXPECT_EQ(b->SoftmaxXent(rows, classes, z.data(), labels.data(), nullptr, nullptr), loss);
}

}  // namespace
}  // namespace kernels
}  // namespace pstrain
