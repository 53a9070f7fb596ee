// The CPU backend's transformer ops: forward values from their definitions,
// backward against central finite differences of sum(R * forward).
#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/half.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/reference_attention.h"

namespace pstrain {
namespace kernels {
namespace {

std::vector<float> Random(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

double Dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// Checks `analytic` (d loss / d input) against central differences of
// `loss` over every element of `input`.
void ExpectGradient(const char* what, std::vector<float>& input, const std::vector<float>& analytic,
                    const std::function<double()>& loss) {
  ASSERT_EQ(input.size(), analytic.size());
  const float h = 1e-2f;
  for (size_t i = 0; i < input.size(); ++i) {
    const float saved = input[i];
    input[i] = saved + h;
    const double up = loss();
    input[i] = saved - h;
    const double down = loss();
    input[i] = saved;
    const double numeric = (up - down) / (2 * h);
    EXPECT_NEAR(analytic[i], numeric, 3e-3 + 1e-2 * std::abs(numeric)) << what << "[" << i << "]";
  }
}

TEST(TransformerOpsTest, LayerNorm) {
  auto b = MakeCpuBackend(1);
  std::mt19937 rng(1);
  const int rows = 3, dim = 8;
  std::vector<float> x = Random(rows * dim, rng, 2.0f), gamma = Random(dim, rng),
                     beta = Random(dim, rng);
  const std::vector<float> r = Random(rows * dim, rng);
  std::vector<float> y(rows * dim), mean(rows), rstd(rows);
  auto loss = [&] {
    b->LayerNorm(rows, dim, x.data(), gamma.data(), beta.data(), y.data(), mean.data(),
                 rstd.data());
    return Dot(y, r);
  };
  loss();
  // The definition, in double.
  for (int i = 0; i < rows; ++i) {
    double m = 0, v = 0;
    for (int j = 0; j < dim; ++j) m += x[i * dim + j];
    m /= dim;
    for (int j = 0; j < dim; ++j) v += (x[i * dim + j] - m) * (x[i * dim + j] - m);
    v /= dim;
    for (int j = 0; j < dim; ++j) {
      const double want = (x[i * dim + j] - m) / std::sqrt(v + 1e-5) * gamma[j] + beta[j];
      EXPECT_NEAR(y[i * dim + j], want, 1e-5 + 1e-5 * std::abs(want));
    }
  }
  std::vector<float> dx(rows * dim), dgamma(dim), dbeta(dim);
  b->LayerNormBackward(rows, dim, x.data(), gamma.data(), mean.data(), rstd.data(), r.data(),
                       dx.data(), dgamma.data(), dbeta.data());
  ExpectGradient("dx", x, dx, loss);
  ExpectGradient("dgamma", gamma, dgamma, loss);
  ExpectGradient("dbeta", beta, dbeta, loss);
}

TEST(TransformerOpsTest, Gelu) {
  auto b = MakeCpuBackend(1);
  std::mt19937 rng(2);
  std::vector<float> x = Random(50, rng, 4.0f);
  const std::vector<float> r = Random(50, rng);
  std::vector<float> y(50);
  auto loss = [&] {
    b->Gelu(50, x.data(), y.data());
    return Dot(y, r);
  };
  loss();
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    const double want = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    EXPECT_NEAR(y[i], want, 1e-6 + 1e-5 * std::abs(want));
  }
  std::vector<float> dx(50);
  b->GeluBackward(50, x.data(), r.data(), dx.data());
  ExpectGradient("dx", x, dx, loss);
}

TEST(TransformerOpsTest, EmbeddingGathersAndScattersAdd) {
  auto b = MakeCpuBackend(1);
  std::mt19937 rng(3);
  const int vocab = 5, dim = 4, rows = 6;
  const std::vector<float> table = Random(vocab * dim, rng);
  const std::vector<int32_t> ids = {4, 0, 4, 2, 2, 4};
  std::vector<float> out(rows * dim, 0.0f);
  b->Embedding(rows, dim, ids.data(), table.data(), out.data(), false);
  b->Embedding(rows, dim, ids.data(), table.data(), out.data(), true);  // now twice the rows
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < dim; ++j) EXPECT_FLOAT_EQ(out[r * dim + j], 2 * table[ids[r] * dim + j]);
  }
  const std::vector<float> dout = Random(rows * dim, rng);
  std::vector<float> dtable(vocab * dim, 1.0f);
  b->EmbeddingBackward(rows, dim, ids.data(), dout.data(), dtable.data());
  for (int j = 0; j < dim; ++j) {
    EXPECT_FLOAT_EQ(dtable[4 * dim + j],
                    1.0f + dout[0 * dim + j] + dout[2 * dim + j] + dout[5 * dim + j]);
    EXPECT_FLOAT_EQ(dtable[1 * dim + j], 1.0f);  // not used
  }
}

// Small enough for finite differences: the gradient is the loss's.
TEST(TransformerOpsTest, CausalAttentionGradient) {
  auto b = MakeCpuBackend(1);
  std::mt19937 rng(4);
  const int batch = 2, seq = 5, heads = 2, head_dim = 3, c = heads * head_dim;
  std::vector<float> qkv = Random(batch * seq * 3 * c, rng, 1.5f);
  const std::vector<float> r = Random(batch * seq * c, rng);
  std::vector<float> lse(batch * heads * seq), out(batch * seq * c);
  auto loss = [&] {
    b->Attention(batch, seq, heads, head_dim, qkv.data(), lse.data(), out.data());
    return Dot(out, r);
  };
  loss();
  // The first token sees only itself: its output is its own value.
  for (int bb = 0; bb < batch; ++bb) {
    for (int j = 0; j < c; ++j) {
      EXPECT_NEAR(out[(bb * seq) * c + j], qkv[(bb * seq) * 3 * c + 2 * c + j], 1e-6);
    }
  }
  std::vector<float> dqkv(qkv.size());
  b->AttentionBackward(batch, seq, heads, head_dim, qkv.data(), out.data(), lse.data(), r.data(),
                       dqkv.data());
  ExpectGradient("dqkv", qkv, dqkv, loss);
}

// The tiled attention against the whole-matrix definition in double, in
// each precision the CPU computes in: one tile, several with a ragged last
// one (300: 128 + 128 + 44 forward, 4 x 64 + 44 backward), odd head sizes, scores large enough that
// the running maximum moves between tiles.
TEST(TransformerOpsTest, CausalAttentionMatchesItsDefinition) {
  struct Shape {
    int batch, seq, heads, head_dim;
    float scale;
  };
  std::mt19937 rng(5);
  for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) {
    auto b = p == Precision::kFp16 ? MakeCpuReferenceBackend() : MakeCpuBackend(2);
    std::string why;
    ASSERT_TRUE(b->SetPrecision(p, &why)) << why;
    // The precision's unit roundoff. Inputs are rounded alike on both
    // sides; the tiles' weights are rounded before the running sum divides
    // them, the definition's after.
    const double unit = p == Precision::kBf16 ? 1.0 / 256 : p == Precision::kFp16 ? 1.0 / 2048 : 0;
    for (const Shape& s :
         {Shape{2, 7, 3, 5, 1.0f}, Shape{1, 300, 2, 16, 4.0f}, Shape{2, 129, 1, 64, 2.0f}}) {
      SCOPED_TRACE(testing::Message() << "precision " << static_cast<int>(p) << ", seq " << s.seq);
      const int c = s.heads * s.head_dim, rows = s.batch * s.seq;
      const std::vector<float> qkv = Random(rows * 3 * c, rng, s.scale),
                               dout = Random(rows * c, rng);
      std::vector<float> lse(s.batch * s.heads * s.seq), out(rows * c), dqkv(qkv.size());
      std::vector<float> want_lse(lse.size()), want_out(out.size()), want_dqkv(qkv.size());
      b->Attention(s.batch, s.seq, s.heads, s.head_dim, qkv.data(), lse.data(), out.data());
      b->AttentionBackward(s.batch, s.seq, s.heads, s.head_dim, qkv.data(), out.data(), lse.data(),
                           dout.data(), dqkv.data());
      ASSERT_EQ(b->error(), "");
      ReferenceAttention(p, s.batch, s.seq, s.heads, s.head_dim, qkv.data(), want_lse.data(),
                         want_out.data());
      ReferenceAttentionBackward(p, s.batch, s.seq, s.heads, s.head_dim, qkv.data(), dout.data(),
                                 want_dqkv.data());
      // Each array within a bound of its largest value: 16-bit rounding
      // moves a value by a share of the terms it sums, not of itself.
      auto expect_close = [&](const char* what, const std::vector<float>& got,
                              const std::vector<float>& want, double rel) {
        double largest = 0, worst = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          largest = std::max(largest, std::abs(double(want[i])));
          worst = std::max(worst, std::abs(double(got[i]) - want[i]));
        }
        std::printf("%s p%d seq %d: worst %.3g of largest %.3g (%.3g)\n", what, int(p), s.seq,
                    worst, largest, worst / largest);
        EXPECT_LE(worst, rel * largest) << what;
      };
      expect_close("lse", lse, want_lse, 1e-6);  // fp32 statistics in every precision
      expect_close("out", out, want_out, 2 * unit + 1e-5);
      expect_close("dqkv", dqkv, want_dqkv, 2 * unit + 1e-5);
    }
  }
}

TEST(TransformerOpsTest, Bf16ProductsRoundTheirInputs) {
  auto b = MakeCpuBackend(1);
  std::string why;
  EXPECT_FALSE(b->SetPrecision(Precision::kFp16, &why));
  EXPECT_NE(why.find("fp16"), std::string::npos) << why;
  std::mt19937 rng(9);
  const int m = 7, n = 5, k = 33;
  const std::vector<float> a = Random(m * k, rng), w = Random(k * n, rng);
  std::vector<float> fp32(m * n), bf16(m * n), want(m * n, 0.0f);
  b->Gemm(false, false, m, n, k, 1.0f, a.data(), w.data(), 0.0f, fp32.data());
  ASSERT_TRUE(b->SetPrecision(Precision::kBf16, &why)) << why;
  b->Gemm(false, false, m, n, k, 1.0f, a.data(), w.data(), 0.0f, bf16.data());
  auto round = [](float v) { return Bf16ToFloat(FloatToBf16(v)); };
  double moved = 0;
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double sum = 0;
      for (int q = 0; q < k; ++q) sum += double(round(a[i * k + q])) * round(w[q * n + j]);
      EXPECT_NEAR(bf16[i * n + j], sum, 1e-5 + 1e-5 * std::abs(sum));
      moved = std::max(moved, std::abs(double(bf16[i * n + j]) - fp32[i * n + j]));
    }
  }
  EXPECT_GT(moved, 1e-4);  // bf16 inputs do change the result
}

TEST(TransformerOpsTest, Axpy) {
  auto b = MakeCpuBackend(1);
  std::vector<float> x = {1, 2, 3}, y = {10, 20, 30};
  b->Axpy(3, -2.0f, x.data(), y.data());
  EXPECT_EQ(y, (std::vector<float>{8, 16, 24}));
  b->Scale(3, 0.5f, y.data());
  EXPECT_EQ(y, (std::vector<float>{4, 8, 12}));
}

}  // namespace
}  // namespace kernels
}  // namespace pstrain
