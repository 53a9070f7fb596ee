#include "kernels/cpu/reference_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/half.h"

namespace pstrain {
namespace kernels {
namespace {

// One (sequence, head) pair: its q, k, v and dout as [seq, head_dim]
// matrices (rounded), its weights, and where its columns lie.
struct Head {
  Head(Precision precision, int seq, int heads, int head_dim, const float* qkv, int b, int h)
      : seq(seq),
        d(head_dim),
        c(heads * head_dim),
        row0(static_cast<int64_t>(b) * seq),
        col(h * head_dim),
        q(Take(precision, qkv, 3 * c, 0)),
        k(Take(precision, qkv, 3 * c, c)),
        v(Take(precision, qkv, 3 * c, 2 * c)),
        a(static_cast<size_t>(seq) * seq, 0.0),
        lse(seq) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    for (int t = 0; t < seq; ++t) {
      double m = -INFINITY, z = 0.0;
      for (int j = 0; j <= t; ++j) m = std::max(m, a[t * seq + j] = scale * Dot(q, t, k, j));
      for (int j = 0; j <= t; ++j) z += a[t * seq + j] = std::exp(a[t * seq + j] - m);
      for (int j = 0; j <= t; ++j) a[t * seq + j] /= z;
      lse[t] = m + std::log(z);
    }
  }
  // The [seq, head_dim] block of x (rows `width` apart) from column `at`.
  std::vector<double> Take(Precision precision, const float* x, int width, int at) const {
    std::vector<double> m(static_cast<size_t>(seq) * d);
    for (int t = 0; t < seq; ++t) {
      for (int j = 0; j < d; ++j) {
        m[t * d + j] = Rounded(precision, x[(row0 + t) * width + at + col + j]);
      }
    }
    return m;
  }
  double Dot(const std::vector<double>& x, int i, const std::vector<double>& y, int j) const {
    double s = 0.0;
    for (int e = 0; e < d; ++e) s += x[i * d + e] * y[j * d + e];
    return s;
  }
  // x rounded to the precision's 16 bits (nearest even), or itself.
  static double Rounded(Precision precision, double x) {
    const float f = static_cast<float>(x);
    switch (precision) {
      case Precision::kBf16:
        return Bf16ToFloat(FloatToBf16(f));
      case Precision::kFp16:
        return HalfToFloat(FloatToHalf(f));
      default:
        return x;
    }
  }

  const int seq, d, c;
  const int64_t row0;
  const int col;
  const std::vector<double> q, k, v;
  std::vector<double> a, lse;
};

}  // namespace

void ReferenceAttention(Precision precision, int batch, int seq, int heads, int head_dim,
                        const float* qkv, float* lse, float* out, float* att) {
  for (int b = 0; b < batch; ++b) {
    for (int h = 0; h < heads; ++h) {
      const Head x(precision, seq, heads, head_dim, qkv, b, h);
      const int64_t bh = static_cast<int64_t>(b) * heads + h;
      for (int t = 0; t < seq; ++t) {
        lse[bh * seq + t] = static_cast<float>(x.lse[t]);
        for (int e = 0; e < head_dim; ++e) {
          double s = 0.0;
          for (int j = 0; j <= t; ++j) {
            s += Head::Rounded(precision, x.a[t * seq + j]) * x.v[j * head_dim + e];
          }
          out[(x.row0 + t) * x.c + x.col + e] = static_cast<float>(s);
        }
        for (int j = 0; att != nullptr && j < seq; ++j) {
          att[(bh * seq + t) * seq + j] = static_cast<float>(x.a[t * seq + j]);
        }
      }
    }
  }
}

void ReferenceAttentionBackward(Precision precision, int batch, int seq, int heads, int head_dim,
                                const float* qkv, const float* dout, float* dqkv) {
  const int c = heads * head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  for (int b = 0; b < batch; ++b) {
    for (int h = 0; h < heads; ++h) {
      const Head x(precision, seq, heads, head_dim, qkv, b, h);
      const std::vector<double> g = x.Take(precision, dout, c, 0);
      // ds = a (da - sum_j a da), da = do v^T; rounded as the products take it.
      std::vector<double> ds(static_cast<size_t>(seq) * seq, 0.0);
      for (int t = 0; t < seq; ++t) {
        double dot = 0.0;
        for (int j = 0; j <= t; ++j) dot += x.a[t * seq + j] * x.Dot(g, t, x.v, j);
        for (int j = 0; j <= t; ++j) {
          ds[t * seq + j] =
              Head::Rounded(precision, x.a[t * seq + j] * (x.Dot(g, t, x.v, j) - dot));
        }
      }
      for (int i = 0; i < seq; ++i) {
        float* row = dqkv + (x.row0 + i) * 3 * c + x.col;
        for (int e = 0; e < head_dim; ++e) {
          double dq = 0.0, dk = 0.0, dv = 0.0;
          for (int j = 0; j < seq; ++j) {
            dq += ds[i * seq + j] * x.k[j * head_dim + e];
            dk += ds[j * seq + i] * x.q[j * head_dim + e];
            dv += Head::Rounded(precision, x.a[j * seq + i]) * g[j * head_dim + e];
          }
          row[e] = static_cast<float>(scale * dq);
          row[c + e] = static_cast<float>(scale * dk);
          row[2 * c + e] = static_cast<float>(dv);
        }
      }
    }
  }
}

}  // namespace kernels
}  // namespace pstrain
