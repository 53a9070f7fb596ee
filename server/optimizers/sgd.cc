#include "server/optimizers/sgd.h"

namespace pstrain {

void Sgd::Update(float* w, float* /*state*/, const float* g, int64_t n,
                 int64_t /*step*/) const {
  for (int64_t i = 0; i < n; ++i) w[i] -= lr_ * (g[i] + wd_ * w[i]);
}

}  // namespace pstrain
