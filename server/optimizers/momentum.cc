#include "server/optimizers/momentum.h"

namespace pstrain {

void Momentum::Update(float* w, float* state, const float* g, int64_t n,
                      int64_t /*step*/) const {
  float* v = state;
  for (int64_t i = 0; i < n; ++i) {
    v[i] = mu_ * v[i] + (g[i] + wd_ * w[i]);
    w[i] -= lr_ * v[i];
  }
}

}  // namespace pstrain
