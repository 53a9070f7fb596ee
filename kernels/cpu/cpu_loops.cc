#include "kernels/cpu/cpu_loops.h"

#include <cstdint>
#include <cstring>

#include "common/simd.h"

namespace pstrain {
namespace kernels {
namespace cpu {
namespace {

// The clones. Separate in-place forms: with `__restrict` on two pointers
// that are one array the compiler may assume what is not true, and
// without it, it keeps a scalar fallback for overlapping arrays.
PSTRAIN_SIMD_CLONES
void ReluInto(int64_t n, const float* __restrict x, float* __restrict y) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

PSTRAIN_SIMD_CLONES
void ReluInPlace(int64_t n, float* __restrict x) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

PSTRAIN_SIMD_CLONES
void ReluBackwardInto(int64_t n, const float* __restrict y, const float* __restrict dy,
                      float* __restrict dx) {
  for (int64_t i = 0; i < n; ++i) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

PSTRAIN_SIMD_CLONES
void ReluBackwardInPlace(int64_t n, const float* __restrict y, float* __restrict d) {
  for (int64_t i = 0; i < n; ++i) d[i] = y[i] > 0.0f ? d[i] : 0.0f;
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
  int32_t n;
  std::memcpy(&n, &shifted, sizeof(n));
  n -= 0x4B400000;  // the bits of 1.5 * 2^23
  const float r = (x - fn * 0.693359375f) + fn * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * (r * r) + r + 1.0f;
  const int32_t bits = (n + 127) << 23;
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

PSTRAIN_SIMD_CLONES
void GeluInto(int64_t n, const float* __restrict x, float* __restrict y) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * GeluSigmoid(x[i]);
}

PSTRAIN_SIMD_CLONES
void GeluInPlace(int64_t n, float* __restrict x) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * GeluSigmoid(x[i]);
}

// GELU'(x) = s + 2 x s (1 - s) c (1 + 3 * 0.044715 x^2), s = sigmoid(2u):
// d/dx of x (1 + tanh u) / 2 with 1 - tanh^2 u = 4 s (1 - s).
inline float GeluGrad(float x) {
  const float s = GeluSigmoid(x);
  x = ClampTen(x);
  return s + 2.0f * x * s * (1.0f - s) * kGeluC * (1.0f + 0.134145f * x * x);
}

PSTRAIN_SIMD_CLONES
void GeluBackwardInto(int64_t n, const float* __restrict x, const float* __restrict dy,
                      float* __restrict dx) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * GeluGrad(x[i]);
}

PSTRAIN_SIMD_CLONES
void GeluBackwardInPlace(int64_t n, const float* __restrict x, float* __restrict d) {
  for (int64_t i = 0; i < n; ++i) d[i] = d[i] * GeluGrad(x[i]);
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

void Relu(int64_t n, const float* x, float* y) {
  if (x == y) {
    ReluInPlace(n, y);
  } else {
    ReluInto(n, x, y);
  }
}

void ReluBackward(int64_t n, const float* y, const float* dy, float* dx) {
  if (dy == dx) {
    ReluBackwardInPlace(n, y, dx);
  } else {
    ReluBackwardInto(n, y, dy, dx);
  }
}

void Gelu(int64_t n, const float* x, float* y) {
  if (x == y) {
    GeluInPlace(n, y);
  } else {
    GeluInto(n, x, y);
  }
}

void GeluBackward(int64_t n, const float* x, const float* dy, float* dx) {
  if (dy == dx) {
    GeluBackwardInPlace(n, x, dx);
  } else {
    GeluBackwardInto(n, x, dy, dx);
  }
}

void AddBias(int rows, int cols, const float* bias, float* y) {
  for (int r = 0; r < rows; ++r) AddRow(cols, bias, y + static_cast<int64_t>(r) * cols);
}

void SumRows(int rows, int cols, const float* dy, float* db) {
  for (int j = 0; j < cols; ++j) db[j] = 0.0f;
  for (int r = 0; r < rows; ++r) AddRow(cols, dy + static_cast<int64_t>(r) * cols, db);
}

void Scale(int64_t n, float alpha, float* x) { ScaleLoop(n, alpha, x); }

void Axpy(int64_t n, float alpha, const float* x, float* y) { AxpyLoop(n, alpha, x, y); }

}  // namespace cpu
}  // namespace kernels
}  // namespace pstrain
