#include "server/optimizers/adafactor.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "common/simd.h"

namespace pstrain {
namespace {

bool Factored(const ChunkShape& shape) { return shape.rows > 1 && shape.cols > 1; }

// sum(g^2 + eps)
PSTRAIN_SIMD_CLONES
double SumSquares(const float* __restrict g, int64_t n, float eps) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += g[i] * g[i] + eps;
  return s;
}

// c = decay * c + k * (g^2 + eps)
PSTRAIN_SIMD_CLONES
void Accumulate(float* __restrict c, const float* __restrict g, int64_t n, float decay, float k,
                float eps) {
  for (int64_t i = 0; i < n; ++i) c[i] = decay * c[i] + k * (g[i] * g[i] + eps);
}

// sum((a * g / sqrt(v))^2)
PSTRAIN_SIMD_CLONES
double SumUpdateSquares(const float* __restrict g, const float* __restrict v, int64_t n, float a) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) {
    const float u = a * g[i] / std::sqrt(v[i]);
    s += u * u;
  }
  return s;
}

// w -= a * g / sqrt(v) + decay * w
PSTRAIN_SIMD_CLONES
void Apply(float* __restrict w, const float* __restrict g, const float* __restrict v, int64_t n,
           float a, float decay) {
  for (int64_t i = 0; i < n; ++i) w[i] -= a * g[i] / std::sqrt(v[i]) + decay * w[i];
}

void AtomicAdd(std::atomic<double>* sum, double x) {
  double old = sum->load(std::memory_order_relaxed);
  while (!sum->compare_exchange_weak(old, old + x, std::memory_order_relaxed)) {
  }
}

}  // namespace

int64_t Adafactor::StateFloats(const ChunkShape& shape) const {
  return Factored(shape) ? shape.rows + shape.cols : shape.numel();
}

void Adafactor::Update(const UpdateContext& ctx, const ChunkShape& shape, float* w, float* state,
                       const float* g, ThreadPool* pool) const {
  const int64_t rows = shape.rows, cols = shape.cols, n = shape.numel();
  const float beta = 1.0f - static_cast<float>(std::pow(static_cast<double>(ctx.step),
                                                        static_cast<double>(decay_rate_)));
  ThreadPool inline_pool(1);
  if (pool == nullptr) pool = &inline_pool;
  std::atomic<double> update_squares{0.0};
  if (!Factored(shape)) {
    float* v = state;
    pool->ParallelFor(n, kMinUpdateGrain, [&](int64_t b, int64_t e) {
      Accumulate(v + b, g + b, e - b, beta, 1.0f - beta, eps_);
      AtomicAdd(&update_squares, SumUpdateSquares(g + b, v + b, e - b, 1.0f));
    });
    const double rms = std::sqrt(update_squares.load() / static_cast<double>(n));
    const float a = ctx.lr / static_cast<float>(std::max(1.0, rms / clip_threshold_));
    pool->ParallelFor(n, kMinUpdateGrain, [&](int64_t b, int64_t e) {
      Apply(w + b, g + b, v + b, e - b, a, ctx.lr * wd_);
    });
    return;
  }
  float* r = state;
  float* c = state + rows;
  const int64_t row_grain = std::max<int64_t>(1, kMinUpdateGrain / cols);
  pool->ParallelFor(rows, row_grain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      r[i] = beta * r[i] + (1.0f - beta) * static_cast<float>(SumSquares(g + i * cols, cols, eps_) /
                                                              static_cast<double>(cols));
    }
  });
  // Column means, each column block over every row.
  const float k = (1.0f - beta) / static_cast<float>(rows);
  pool->ParallelFor(cols, std::max<int64_t>(256, kMinUpdateGrain / rows),
                    [&](int64_t b, int64_t e) {
                      Accumulate(c + b, g + b, e - b, beta, k, eps_);
                      for (int64_t i = 1; i < rows; ++i)
                        Accumulate(c + b, g + i * cols + b, e - b, 1.0f, k, eps_);
                    });
  double r_sum = 0;
  for (int64_t i = 0; i < rows; ++i) r_sum += r[i];
  const double r_mean = r_sum / static_cast<double>(rows);
  // V_ij = r_i c_j / mean(r), so U_ij = g_ij * sqrt(mean(r) / r_i) / sqrt(c_j).
  auto row_scale = [&](int64_t i) { return static_cast<float>(std::sqrt(r_mean / r[i])); };
  pool->ParallelFor(rows, row_grain, [&](int64_t b, int64_t e) {
    double s = 0;
    for (int64_t i = b; i < e; ++i) s += SumUpdateSquares(g + i * cols, c, cols, row_scale(i));
    AtomicAdd(&update_squares, s);
  });
  const double rms = std::sqrt(update_squares.load() / static_cast<double>(n));
  const float a = ctx.lr / static_cast<float>(std::max(1.0, rms / clip_threshold_));
  pool->ParallelFor(rows, row_grain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      Apply(w + i * cols, g + i * cols, c, cols, a * row_scale(i), ctx.lr * wd_);
    }
  });
}

}  // namespace pstrain
