#include "server/round_sums.h"

#include "common/simd.h"

namespace pstrain {

// The sum of x[i]² in double, in kLanes partial sums (which vectorise), the
// same bits in either clone: a float's square is exact in double, so
// contracting to an FMA changes nothing.
PSTRAIN_SIMD_CLONES
double SumSquares(const float* x, int64_t n) {
  constexpr int kLanes = 8;
  double lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) lanes[k] += static_cast<double>(x[i + k]) * x[i + k];
  }
  double sum = 0;
  for (; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  for (double lane : lanes) sum += lane;
  return sum;
}

// out = a * x (out may be x)
PSTRAIN_SIMD_CLONES
void Scale(const float* x, int64_t n, float a, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = a * x[i];
}

// A BSP round's sum, one push at a time, in one pass over y: y = base +
// a * x with base 0 for the round's first push (y holds the last round's
// mean then) and y after, and for the push that closes the round times
// `mean` (1 / the round's samples). The same float operations in the same
// order as zeroing y (a pass of its own), y += a * x and y *= mean (another)
// would do, so the result is the same to the bit, contracted to an FMA or
// not (the base is a +0.0f, as the zeroed y was).
PSTRAIN_SIMD_CLONES
void Accumulate(const float* __restrict x, int64_t n, float a, bool first, bool close, float mean,
                float* __restrict y) {
  if (first && close) {
    for (int64_t i = 0; i < n; ++i) y[i] = mean * (0.0f + a * x[i]);
  } else if (first) {
    for (int64_t i = 0; i < n; ++i) y[i] = 0.0f + a * x[i];
  } else if (close) {
    for (int64_t i = 0; i < n; ++i) y[i] = mean * (y[i] + a * x[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
  }
}

}  // namespace pstrain
