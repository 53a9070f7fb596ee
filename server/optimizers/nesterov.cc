#include "server/optimizers/nesterov.h"

#include <cmath>

#include "common/simd.h"

namespace pstrain {
namespace {

PSTRAIN_SIMD_CLONES
void Loop(float* __restrict w, float* __restrict v, const float* __restrict g, int64_t n, float lr,
          float mu, float wd) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] + wd * w[i];
    v[i] = mu * v[i] + gi;
    w[i] -= lr * (gi + mu * v[i]);
  }
}

}  // namespace

void Nesterov::UpdateRange(const UpdateContext& ctx, float* w, float* state, int64_t stride,
                           const float* g, int64_t n) const {
  Loop(w, state + 0 * stride, g, n, ctx.lr, mu_, wd_);
}

}  // namespace pstrain
