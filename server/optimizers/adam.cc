#include "server/optimizers/adam.h"

#include <cmath>

namespace pstrain {

void Adam::Update(float* w, float* state, const float* g, int64_t n, int64_t step) const {
  float* m = state;
  float* v = state + n;
  const double t = static_cast<double>(step);
  const float c1 = static_cast<float>(1.0 / (1.0 - std::pow(b1_, t)));
  const float c2 = static_cast<float>(1.0 / (1.0 - std::pow(b2_, t)));
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] + wd_ * w[i];
    m[i] = b1_ * m[i] + (1.0f - b1_) * gi;
    v[i] = b2_ * v[i] + (1.0f - b2_) * gi * gi;
    w[i] -= lr_ * (m[i] * c1) / (std::sqrt(v[i] * c2) + eps_);
  }
}

}  // namespace pstrain
