// Each CPU kernel against a naive loop on random inputs.
#include "kernels/cpu/cpu_backend.h"

#include <cmath>
#include <random>
#include <utility>
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
      if (z[r * classes + c] > mx) {
        mx = z[r * classes + c];
        arg = c;
      }
    }
    for (int c = 0; c < classes; ++c) sum += std::exp(z[r * classes + c] - mx);
    want_loss += -(z[r * classes + labels[r]] - mx - std::log(sum));
    want_correct += arg == labels[r];
    for (int c = 0; c < classes; ++c) {
      want_d[r * classes + c] = (std::exp(z[r * classes + c] - mx) / sum - (c == labels[r])) / rows;
    }
  }
  EXPECT_NEAR(loss, want_loss / rows, 1e-5);
  EXPECT_EQ(correct, want_correct);
  ExpectClose(d, want_d, 1e-5);
  EXPECT_EQ(b->SoftmaxXent(rows, classes, z.data(), labels.data(), nullptr, nullptr), loss);
}

// The shapes and inputs of SplittingOverThreadsChangesNoBits.
constexpr int kBatch = 3, kSeq = 140, kHeads = 2, kHeadDim = 8, kRows = kBatch * kSeq;  // tiles
constexpr int kDim = kHeads * kHeadDim, kBig = 70000;  // above a part's grain
struct OpInputs {
  std::vector<float> qkv, dout, x, dy, gamma, beta;
  std::vector<int32_t> labels;
};
// What every op of the backend made of them.
struct OpOutputs {
  std::vector<std::vector<float>> gemms;
  std::vector<float> lse, out, dqkv, gelu, dgelu, relu, drelu, ln, dln, dgamma, dbeta, bias, dbias,
      dlogits;
  float loss = 0;
  int correct = 0;
};

OpOutputs RunEveryOp(int threads, const OpInputs& in) {
  auto b = MakeCpuBackend(threads);
  OpOutputs o;
  // Tall (split by rows) and wide (by columns), every transposition.
  for (const auto& [m, n] : {std::pair{300, 40}, std::pair{40, 300}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const int k = 70;
        std::vector<float> c(m * n, 0.5f);
        b->Gemm(ta, tb, m, n, k, 1.5f, in.x.data(), in.dy.data(), 0.25f, c.data());
        o.gemms.push_back(c);
      }
    }
  }
  o.lse.resize(kBatch * kHeads * kSeq);
  o.out.resize(kRows * kDim);
  o.dqkv.resize(in.qkv.size());
  b->Attention(kBatch, kSeq, kHeads, kHeadDim, in.qkv.data(), o.lse.data(), o.out.data());
  b->AttentionBackward(kBatch, kSeq, kHeads, kHeadDim, in.qkv.data(), o.out.data(), o.lse.data(),
                       in.dout.data(), o.dqkv.data());
  for (std::vector<float>* v : {&o.gelu, &o.dgelu, &o.relu, &o.drelu}) v->resize(kBig);
  b->Gelu(kBig, in.x.data(), o.gelu.data());
  b->GeluBackward(kBig, in.x.data(), in.dy.data(), o.dgelu.data());
  b->ReluForward(kBig, in.x.data(), o.relu.data());
  b->ReluBackward(kBig, o.relu.data(), in.dy.data(), o.drelu.data());
  const int ln_rows = kBig / kDim;
  std::vector<float> mean(ln_rows), rstd(ln_rows);
  o.ln.resize(ln_rows * kDim);
  o.dln.resize(ln_rows * kDim);
  o.dgamma.resize(kDim);
  o.dbeta.resize(kDim);
  b->LayerNorm(ln_rows, kDim, in.x.data(), in.gamma.data(), in.beta.data(), o.ln.data(),
               mean.data(), rstd.data());
  b->LayerNormBackward(ln_rows, kDim, in.x.data(), in.gamma.data(), mean.data(), rstd.data(),
                       in.dy.data(), o.dln.data(), o.dgamma.data(), o.dbeta.data());
  o.bias = std::vector<float>(in.x.begin(), in.x.begin() + ln_rows * kDim);
  b->AddBias(ln_rows, kDim, in.beta.data(), o.bias.data());
  o.dbias.resize(kDim);
  b->BiasGrad(ln_rows, kDim, in.dy.data(), o.dbias.data());
  o.dlogits.resize(kRows * kDim);
  o.loss =
      b->SoftmaxXent(kRows, kDim, o.out.data(), in.labels.data(), o.dlogits.data(), &o.correct);
  EXPECT_EQ(b->error(), "");
  return o;
}

// Every op on one thread and on three: the parts split rows, columns or
// heads, never a sum, so the bits are the same -- but for the matrix
// products, whose parts OpenBLAS tiles (and rounds) its own way.
TEST(CpuBackendTest, SplittingOverThreadsChangesNoBits) {
  std::mt19937 rng(4);
  OpInputs in;
  in.qkv = Random(kRows * 3 * kDim, rng);
  in.dout = Random(kRows * kDim, rng);
  in.x = Random(kBig, rng);
  in.dy = Random(kBig, rng);
  in.gamma = Random(kDim, rng);
  in.beta = Random(kDim, rng);
  in.labels.resize(kRows);
  for (int32_t& l : in.labels) l = static_cast<int32_t>(rng() % kDim);
  const OpOutputs one = RunEveryOp(1, in), three = RunEveryOp(3, in);
  for (size_t g = 0; g < one.gemms.size(); ++g) {
    for (size_t i = 0; i < one.gemms[g].size(); ++i) {
      ASSERT_NEAR(one.gemms[g][i], three.gemms[g][i], 2e-5)  // 70 terms of up to 1.5
          << "product " << g << " at " << i;
    }
  }
  EXPECT_EQ(one.lse, three.lse);
  EXPECT_EQ(one.out, three.out);
  EXPECT_EQ(one.dqkv, three.dqkv);
  EXPECT_EQ(one.gelu, three.gelu);
  EXPECT_EQ(one.dgelu, three.dgelu);
  EXPECT_EQ(one.relu, three.relu);
  EXPECT_EQ(one.drelu, three.drelu);
  EXPECT_EQ(one.ln, three.ln);
  EXPECT_EQ(one.dln, three.dln);
  EXPECT_EQ(one.dgamma, three.dgamma);
  EXPECT_EQ(one.dbeta, three.dbeta);
  EXPECT_EQ(one.bias, three.bias);
  EXPECT_EQ(one.dbias, three.dbias);
  EXPECT_EQ(one.dlogits, three.dlogits);
  EXPECT_EQ(one.loss, three.loss);
  EXPECT_EQ(one.correct, three.correct);
}

}  // namespace
}  // namespace kernels
}  // namespace pstrain
