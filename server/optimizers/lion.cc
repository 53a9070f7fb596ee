#include "server/optimizers/lion.h"

#include "common/simd.h"

namespace pstrain {
namespace {

PSTRAIN_SIMD_CLONES
void Loop(float* __restrict w, float* __restrict m, const float* __restrict g, int64_t n,
          float lr, float b1, float b2, float wd) {
  for (int64_t i = 0; i < n; ++i) {
    const float c = b1 * m[i] + (1.0f - b1) * g[i];
    // sign(c) as a select, so that both clones vectorise.
    const float sign = c > 0.0f ? 1.0f : (c < 0.0f ? -1.0f : 0.0f);
    w[i] -= lr * (sign + wd * w[i]);
    m[i] = b2 * m[i] + (1.0f - b2) * g[i];
  }
}

}  // namespace

void Lion::UpdateRange(const UpdateContext& ctx, float* w, float* state, int64_t /*stride*/,
                       const float* g, int64_t n) const {
  Loop(w, state, g, n, ctx.lr, b1_, b2_, wd_);
}

}  // namespace pstrain
