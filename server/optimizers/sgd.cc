#include "server/optimizers/sgd.h"

#include <cmath>

#include "common/simd.h"

namespace pstrain {
namespace {

PSTRAIN_SIMD_CLONES
void Loop(float* __restrict w, const float* __restrict g, int64_t n, float lr, float wd) {
  for (int64_t i = 0; i < n; ++i) {
    w[i] -= lr * (g[i] + wd * w[i]);
  }
}

}  // namespace

void Sgd::UpdateRange(const UpdateContext& ctx, float* w, float* /*state*/, int64_t /*stride*/,
                      const float* g, int64_t n) const {
  Loop(w, g, n, ctx.lr, wd_);
}

}  // namespace pstrain
