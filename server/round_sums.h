// The loops of a BSP round's sums at a server (server/chunk_store.h):
// element loops compiled twice, for x86-64-v3 and baseline x86-64
// (common/simd.h), whose results are the same bits in either clone.
#ifndef PSTRAIN_SERVER_ROUND_SUMS_H_
#define PSTRAIN_SERVER_ROUND_SUMS_H_

#include <cstdint>

namespace pstrain {

// The sum of x[i]² in double.
double SumSquares(const float* x, int64_t n);
// out = a * x (out may be x).
void Scale(const float* x, int64_t n, float a, float* out);
// A BSP round's sum, one push at a time, in one pass over y: y = base +
// a * x with base 0 for the round's first push and y after, and for the
// push that closes the round times `mean` (1 / the round's samples).
void Accumulate(const float* __restrict x, int64_t n, float a, bool first, bool close, float mean,
                float* __restrict y);

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_ROUND_SUMS_H_
