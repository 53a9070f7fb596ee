#include "kernels/cpu/cpu_attention.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/half.h"
#include "kernels/cpu/cpu_loops.h"

namespace pstrain {
namespace kernels {
namespace cpu {
namespace {

// Where one (sequence, head) pair's matrices lie in the row layouts: q, k
// and v rows of qkv (and dqkv) w3 floats apart, out and dout rows c apart.
struct HeadView {
  HeadView(const AttentionShape& s, int64_t b, int h)
      : seq(s.seq),
        d(s.head_dim),
        c(s.heads * s.head_dim),
        w3(3 * c),
        scale(1.0f / std::sqrt(static_cast<float>(s.head_dim))),
        qkv_at(b * s.seq * w3 + static_cast<int64_t>(h) * s.head_dim),
        out_at(b * s.seq * c + static_cast<int64_t>(h) * s.head_dim),
        lse_at((b * s.heads + h) * s.seq) {}
  const int seq, d, c, w3;
  const float scale;
  const int64_t qkv_at, out_at, lse_at;
};

// The thread's tiles (each [tile, tile], rows `tile` apart) and rows.
struct Tiles {
  std::vector<float> p, p16, ds, ds16;
  std::vector<float> max, sum, delta;
};
Tiles& ThreadTiles() {
  thread_local Tiles tiles;
  return tiles;
}

// s = scale q[i0..i0+rows) k[j0..j0+cols)^T, rows `tile` apart.
void Scores(const HeadView& v, const float* q, const float* k, int i0, int rows, int j0, int cols,
            int tile, float* s) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, v.d, v.scale,
              q + static_cast<int64_t>(i0) * v.w3, v.w3, k + static_cast<int64_t>(j0) * v.w3, v.w3,
              0.0f, s, tile);
}

// How many of a tile's columns from key j0 query t sees (t >= j0).
int Seen(int t, int j0, int cols) { return std::min(cols, t + 1 - j0); }

// `rows` rows of a tile (rows `tile` apart) as a product's input: itself
// in fp32, else rounded into `rounded`.
const float* Operand(Precision precision, int rows, int tile, const float* x,
                     std::vector<float>* rounded) {
  if (precision == Precision::kFp32) return x;
  rounded->resize(static_cast<size_t>(tile) * tile);
  RoundTo(precision, static_cast<int64_t>(rows) * tile, x, rounded->data());
  return rounded->data();
}

}  // namespace

void RoundTo(Precision precision, int64_t n, const float* x, float* out) {
  switch (precision) {
    case Precision::kFp32:
      if (out != x) std::copy(x, x + n, out);
      return;
    case Precision::kBf16:
      for (int64_t i = 0; i < n; ++i) out[i] = Bf16ToFloat(FloatToBf16(x[i]));
      return;
    case Precision::kFp16:
      for (int64_t i = 0; i < n; ++i) out[i] = HalfToFloat(FloatToHalf(x[i]));
      return;
  }
}

// Each query tile walks the key tiles up to its diagonal: a tile's scores,
// each row's running maximum moved (the output so far rescaled by
// e^(old - new)) and its sum of e^(score - maximum) grown, then out += the
// tile's e^(score - maximum) times its values. At the end each row is
// divided by its sum, and lse = maximum + log(sum).
void AttentionHead(const AttentionShape& s, Precision precision, const float* qkv, int64_t b, int h,
                   float* lse, float* out) {
  const HeadView v(s, b, h);
  const float* q = qkv + v.qkv_at;
  const float* k = q + v.c;
  const float* val = q + 2 * v.c;
  float* o = out + v.out_at;
  constexpr int kTile = kForwardTile;
  Tiles& t = ThreadTiles();
  t.p.resize(static_cast<size_t>(kTile) * kTile);
  t.max.resize(kTile);
  t.sum.resize(kTile);
  for (int i0 = 0; i0 < v.seq; i0 += kTile) {
    const int rows = std::min(kTile, v.seq - i0);
    for (int j0 = 0; j0 < i0 + rows; j0 += kTile) {
      const int cols = std::min(kTile, v.seq - j0);
      Scores(v, q, k, i0, rows, j0, cols, kTile, t.p.data());
      for (int r = 0; r < rows; ++r) {
        float* row = t.p.data() + static_cast<int64_t>(r) * kTile;
        const int seen = Seen(i0 + r, j0, cols);
        const float m = j0 == 0 ? Max(seen, row) : std::max(t.max[r], Max(seen, row));
        const float sum = ExpSum(seen, row, m, row);
        std::fill(row + seen, row + cols, 0.0f);
        if (j0 == 0) {
          t.sum[r] = sum;
        } else {
          const float alpha = std::exp(t.max[r] - m);
          t.sum[r] = t.sum[r] * alpha + sum;
          if (alpha != 1.0f) Scale(v.d, alpha, o + static_cast<int64_t>(i0 + r) * v.c);
        }
        t.max[r] = m;
      }
      const float* p = Operand(precision, rows, kTile, t.p.data(), &t.p16);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, v.d, cols, 1.0f, p, kTile,
                  val + static_cast<int64_t>(j0) * v.w3, v.w3, j0 == 0 ? 0.0f : 1.0f,
                  o + static_cast<int64_t>(i0) * v.c, v.c);
    }
    for (int r = 0; r < rows; ++r) {
      Scale(v.d, 1.0f / t.sum[r], o + static_cast<int64_t>(i0 + r) * v.c);
      lse[v.lse_at + i0 + r] = t.max[r] + std::log(t.sum[r]);
    }
  }
}

// Each key tile walks the query tiles from its diagonal down: the tile's
// weights p = e^(score - lse) again, then dv += p^T do, dp = do v^T,
// ds = p (dp - delta) with delta = do . out per row (the softmax's
// backward without the weights' rows), dk += scale ds^T q and
// dq += scale ds k.
void AttentionBackwardHead(const AttentionShape& s, Precision precision, const float* qkv,
                           const float* out, const float* lse, const float* dout, int64_t b, int h,
                           float* dqkv) {
  const HeadView v(s, b, h);
  const float* q = qkv + v.qkv_at;
  const float* k = q + v.c;
  const float* val = q + 2 * v.c;
  float* dq = dqkv + v.qkv_at;
  float* dk = dq + v.c;
  float* dv = dq + 2 * v.c;
  const float* o = out + v.out_at;
  const float* d_o = dout + v.out_at;
  const float* head_lse = lse + v.lse_at;
  constexpr int kTile = kBackwardTile;
  Tiles& t = ThreadTiles();
  t.p.resize(static_cast<size_t>(kTile) * kTile);
  t.ds.resize(static_cast<size_t>(kTile) * kTile);
  t.delta.resize(v.seq);
  for (int i = 0; i < v.seq; ++i) {
    const float* a = o + static_cast<int64_t>(i) * v.c;
    const float* g = d_o + static_cast<int64_t>(i) * v.c;
    float dot = 0.0f;
    for (int j = 0; j < v.d; ++j) dot += a[j] * g[j];
    t.delta[i] = dot;
    for (float* part : {dq, dk, dv}) {
      std::fill_n(part + static_cast<int64_t>(i) * v.w3, v.d, 0.0f);
    }
  }
  for (int j0 = 0; j0 < v.seq; j0 += kTile) {
    const int cols = std::min(kTile, v.seq - j0);
    const int64_t at_j = static_cast<int64_t>(j0) * v.w3;
    for (int i0 = j0; i0 < v.seq; i0 += kTile) {
      const int rows = std::min(kTile, v.seq - i0);
      const int64_t at_i = static_cast<int64_t>(i0) * v.w3, at_o = static_cast<int64_t>(i0) * v.c;
      Scores(v, q, k, i0, rows, j0, cols, kTile, t.p.data());
      for (int r = 0; r < rows; ++r) {
        float* row = t.p.data() + static_cast<int64_t>(r) * kTile;
        const int seen = Seen(i0 + r, j0, cols);
        ExpSum(seen, row, head_lse[i0 + r], row);
        std::fill(row + seen, row + cols, 0.0f);
      }
      const float* p = Operand(precision, rows, kTile, t.p.data(), &t.p16);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, v.d, rows, 1.0f, p, kTile,
                  d_o + at_o, v.c, 1.0f, dv + at_j, v.w3);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, v.d, 1.0f, d_o + at_o, v.c,
                  val + at_j, v.w3, 0.0f, t.ds.data(), kTile);
      for (int r = 0; r < rows; ++r) {
        const int64_t at = static_cast<int64_t>(r) * kTile;
        SoftmaxBackwardGiven(cols, t.p.data() + at, t.delta[i0 + r], t.ds.data() + at);
      }
      const float* ds = Operand(precision, rows, kTile, t.ds.data(), &t.ds16);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, v.d, rows, v.scale, ds, kTile,
                  q + at_i, v.w3, 1.0f, dk + at_j, v.w3);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, v.d, cols, v.scale, ds, kTile,
                  k + at_j, v.w3, 1.0f, dq + at_i, v.w3);
    }
  }
}

}  // namespace cpu
}  // namespace kernels
}  // namespace pstrain
