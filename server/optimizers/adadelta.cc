#include "server/optimizers/adadelta.h"

#include <cmath>

#include "common/simd.h"

namespace pstrain {
namespace {

PSTRAIN_SIMD_CLONES
void Loop(float* __restrict w, float* __restrict s, float* __restrict u, const float* __restrict g,
          int64_t n, float lr, float rho, float eps, float wd) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] + wd * w[i];
    s[i] = rho * s[i] + (1.0f - rho) * gi * gi;
    const float d = std::sqrt(u[i] + eps) / std::sqrt(s[i] + eps) * gi;
    u[i] = rho * u[i] + (1.0f - rho) * d * d;
    w[i] -= lr * d;
  }
}

}  // namespace

void Adadelta::UpdateRange(const UpdateContext& ctx, float* w, float* state, int64_t stride,
                           const float* g, int64_t n) const {
  Loop(w, state + 0 * stride, state + 1 * stride, g, n, ctx.lr, rho_, eps_, wd_);
}

}  // namespace pstrain
