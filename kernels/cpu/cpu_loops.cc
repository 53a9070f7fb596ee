#include "kernels/cpu/cpu_loops.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/simd.h"

#if defined(__clang__)
// Clang vectorises a float max reduction only under fast math and says so
// as a warning; its build here (the thread-safety check) has no clones to
// vectorise, and must not fail for it.
#pragma clang diagnostic ignored "-Wpass-failed"
#endif

namespace pstrain {
namespace kernels {
namespace cpu {
namespace {

// The clones. An output that may be an input has no `__restrict`; `omp
// simd` tells the vectoriser the iterations are independent (each reads
// its own elements before it writes them), so it needs no fallback for
// overlapping arrays.
PSTRAIN_SIMD_CLONES
void ReluLoop(int64_t n, const float* x, float* y) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

PSTRAIN_SIMD_CLONES
void ReluBackwardLoop(int64_t n, const float* __restrict y, const float* dy, float* dx) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float g = dy[i];  // loaded either way: a select, not a branch
    dx[i] = y[i] > 0.0f ? g : 0.0f;
  }
}

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2/pi)

// e^x for x in [-87.3, 88] (2^n stays a normal float; callers clamp), in
// operations both clones vectorise: x = n ln2 + r with |r| <= ln2/2, e^r by
// Cephes' expf polynomial, 2^n built in the exponent bits.
inline float Exp(float x) {
  // n = round(x / ln2): adding 1.5 * 2^23 rounds to an integer, which then
  // stands in the low bits of the sum; taking 1.5 * 2^23 away gives it as a
  // float. No branch, call or float-to-int conversion (which may trap, so
  // the vectoriser would not run it under a select).
  const float shifted = x * 1.44269504088896341f + 12582912.0f;
  const float fn = shifted - 12582912.0f;
  uint32_t n;  // unsigned: a NaN's garbage bits wrap instead of overflowing
  std::memcpy(&n, &shifted, sizeof(n));
  n -= 0x4B400000u;  // the bits of 1.5 * 2^23
  const float r = (x - fn * 0.693359375f) + fn * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * (r * r) + r + 1.0f;
  const uint32_t bits = (n + 127u) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return er * scale;
}

// x clamped to [-10, 10], in two selects the vectoriser turns into blends.
inline float ClampTen(float x) {
  x = x > 10.0f ? 10.0f : x;
  return x < -10.0f ? -10.0f : x;
}

// sigmoid(2u) = (1 + tanh u) / 2 for GELU's u. Past |x| = 10 it is 0 or 1
// to a float's precision: x is clamped there, so x^3 cannot overflow (and
// the gradient below cannot make 0 * inf).
inline float GeluSigmoid(float x) {
  x = ClampTen(x);
  const float u = kGeluC * (x + 0.044715f * x * x * x);
  return 1.0f / (1.0f + Exp(-2.0f * u));
}

// x * sigmoid(2u); below -10 the product of a huge x and the clamped
// sigmoid's ~1e-38 would not be ~0, so it is -0 there.
inline float GeluOf(float x) { return x < -10.0f ? -0.0f : x * GeluSigmoid(x); }

PSTRAIN_SIMD_CLONES
void GeluLoop(int64_t n, const float* x, float* y) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = GeluOf(x[i]);
}

// GELU'(x) = s + 2 x s (1 - s) c (1 + 3 * 0.044715 x^2), s = sigmoid(2u):
// d/dx of x (1 + tanh u) / 2 with 1 - tanh^2 u = 4 s (1 - s).
inline float GeluGrad(float x) {
  const float s = GeluSigmoid(x);
  x = ClampTen(x);
  return s + 2.0f * x * s * (1.0f - s) * kGeluC * (1.0f + 0.134145f * x * x);
}

PSTRAIN_SIMD_CLONES
void GeluBackwardLoop(int64_t n, const float* __restrict x, const float* dy, float* dx) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * GeluGrad(x[i]);
}

PSTRAIN_SIMD_CLONES
float MaxLoop(int n, const float* __restrict x) {
  float m = x[0];
#pragma omp simd reduction(max : m)
  for (int j = 1; j < n; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

// e^x for x <= 0, clamped at -87.
inline float ExpNonPositive(float x) { return Exp(x < -87.0f ? -87.0f : x); }

PSTRAIN_SIMD_CLONES
float ExpSumLoop(int n, const float* x, float shift, float* e) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < n; ++j) {
    e[j] = ExpNonPositive(x[j] - shift);
    sum += e[j];
  }
  return sum;
}

PSTRAIN_SIMD_CLONES
void SoftmaxBackwardGivenLoop(int n, const float* __restrict a, float dot, float* __restrict d) {
#pragma omp simd
  for (int j = 0; j < n; ++j) d[j] = a[j] * (d[j] - dot);
}

PSTRAIN_SIMD_CLONES
void LayerNormRow(int dim, const float* __restrict x, const float* __restrict gamma,
                  const float* __restrict beta, float* __restrict y, float* mean, float* rstd) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < dim; ++j) sum += x[j];
  const float m = sum / static_cast<float>(dim);
  float squares = 0.0f;
#pragma omp simd reduction(+ : squares)
  for (int j = 0; j < dim; ++j) squares += (x[j] - m) * (x[j] - m);
  const float s = 1.0f / std::sqrt(squares / static_cast<float>(dim) + 1e-5f);
  for (int j = 0; j < dim; ++j) y[j] = (x[j] - m) * s * gamma[j] + beta[j];
  *mean = m;
  *rstd = s;
}

// With xhat = (x - mean) * rstd and g = dy * gamma:
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
PSTRAIN_SIMD_CLONES
void LayerNormBackwardRow(int dim, const float* __restrict x, const float* __restrict gamma,
                          float mean, float rstd, const float* __restrict dy,
                          float* __restrict dx) {
  float sum_g = 0.0f, sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_g, sum_gx)
  for (int j = 0; j < dim; ++j) {
    const float g = dy[j] * gamma[j];
    sum_g += g;
    sum_gx += g * ((x[j] - mean) * rstd);
  }
  const float mean_g = sum_g / static_cast<float>(dim);
  const float mean_gx = sum_gx / static_cast<float>(dim);
  for (int j = 0; j < dim; ++j) {
    const float xhat = (x[j] - mean) * rstd;
    dx[j] = rstd * (dy[j] * gamma[j] - mean_g - xhat * mean_gx);
  }
}

// dgamma += dy * xhat and dbeta += dy along one row's columns.
PSTRAIN_SIMD_CLONES
void AddParamGradsRow(int n, const float* __restrict x, float mean, float rstd,
                      const float* __restrict dy, float* __restrict dgamma,
                      float* __restrict dbeta) {
  for (int j = 0; j < n; ++j) {
    dgamma[j] += dy[j] * ((x[j] - mean) * rstd);
    dbeta[j] += dy[j];
  }
}

PSTRAIN_SIMD_CLONES
void AddRow(int cols, const float* __restrict row, float* __restrict y) {
  for (int j = 0; j < cols; ++j) y[j] += row[j];
}

PSTRAIN_SIMD_CLONES
void ScaleLoop(int64_t n, float alpha, float* __restrict x) {
  for (int64_t i = 0; i < n; ++i) x[i] *= alpha;
}

PSTRAIN_SIMD_CLONES
void AxpyLoop(int64_t n, float alpha, const float* __restrict x, float* __restrict y) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

}  // namespace

void Relu(int64_t n, const float* x, float* y) { ReluLoop(n, x, y); }

void ReluBackward(int64_t n, const float* y, const float* dy, float* dx) {
  ReluBackwardLoop(n, y, dy, dx);
}

void Gelu(int64_t n, const float* x, float* y) { GeluLoop(n, x, y); }

void GeluBackward(int64_t n, const float* x, const float* dy, float* dx) {
  GeluBackwardLoop(n, x, dy, dx);
}

void AddBias(int rows, int cols, const float* bias, float* y) {
  for (int r = 0; r < rows; ++r) AddRow(cols, bias, y + static_cast<int64_t>(r) * cols);
}

void SumRows(int rows, int cols, int64_t stride, const float* dy, float* db) {
  for (int j = 0; j < cols; ++j) db[j] = 0.0f;
  for (int r = 0; r < rows; ++r) AddRow(cols, dy + r * stride, db);
}

float Max(int n, const float* x) { return MaxLoop(n, x); }

float ExpSum(int n, const float* x, float shift, float* e) { return ExpSumLoop(n, x, shift, e); }

void SoftmaxBackwardGiven(int n, const float* a, float dot, float* d) {
  SoftmaxBackwardGivenLoop(n, a, dot, d);
}

void LayerNorm(int rows, int dim, const float* x, const float* gamma, const float* beta, float* y,
               float* mean, float* rstd) {
  for (int r = 0; r < rows; ++r) {
    const int64_t at = static_cast<int64_t>(r) * dim;
    LayerNormRow(dim, x + at, gamma, beta, y + at, mean + r, rstd + r);
  }
}

void LayerNormBackwardRows(int rows, int dim, const float* x, const float* gamma, const float* mean,
                           const float* rstd, const float* dy, float* dx) {
  for (int r = 0; r < rows; ++r) {
    const int64_t at = static_cast<int64_t>(r) * dim;
    LayerNormBackwardRow(dim, x + at, gamma, mean[r], rstd[r], dy + at, dx + at);
  }
}

void LayerNormParamGrads(int rows, int dim, int begin, int end, const float* x, const float* mean,
                         const float* rstd, const float* dy, float* dgamma, float* dbeta) {
  for (int j = begin; j < end; ++j) dgamma[j] = dbeta[j] = 0.0f;
  for (int r = 0; r < rows; ++r) {
    const int64_t at = static_cast<int64_t>(r) * dim + begin;
    AddParamGradsRow(end - begin, x + at, mean[r], rstd[r], dy + at, dgamma + begin, dbeta + begin);
  }
}

void Scale(int64_t n, float alpha, float* x) { ScaleLoop(n, alpha, x); }

void Axpy(int64_t n, float alpha, const float* x, float* y) { AxpyLoop(n, alpha, x, y); }

}  // namespace cpu
}  // namespace kernels
}  // namespace pstrain
