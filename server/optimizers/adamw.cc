#include "server/optimizers/adamw.h"

#include <cmath>

#include "common/simd.h"

namespace pstrain {
namespace {

PSTRAIN_SIMD_CLONES
void Loop(float* __restrict w, float* __restrict m, float* __restrict v, const float* __restrict g,
          int64_t n, float lr, float b1, float b2, float eps, float wd, float c1, float c2) {
  for (int64_t i = 0; i < n; ++i) {
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    w[i] -= lr * ((m[i] * c1) / (std::sqrt(v[i] * c2) + eps) + wd * w[i]);
  }
}

}  // namespace

void AdamW::UpdateRange(const UpdateContext& ctx, float* w, float* state, int64_t stride,
                        const float* g, int64_t n) const {
  const double t = static_cast<double>(ctx.step);
  const float c1 = static_cast<float>(1.0 / (1.0 - std::pow(b1_, t)));
  const float c2 = static_cast<float>(1.0 / (1.0 - std::pow(b2_, t)));
  Loop(w, state + 0 * stride, state + 1 * stride, g, n, ctx.lr, b1_, b2_, eps_, wd_, c1, c2);
}

}  // namespace pstrain
