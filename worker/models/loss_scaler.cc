#include "worker/models/loss_scaler.h"

#include <algorithm>
#include <cmath>

namespace pstrain {

bool LossScaler::Unscale(std::vector<std::vector<float>>* grads) {
  for (const std::vector<float>& g : *grads) {
    for (float v : g) {
      if (!std::isfinite(v)) {
        scale_ = std::max(1.0f, scale_ / 2);
        clean_ = 0;
        ++overflows_;
        return false;
      }
    }
  }
  const float inv = 1.0f / scale_;  // a power of two: exact
  for (std::vector<float>& g : *grads) {
    for (float& v : g) v *= inv;
  }
  if (++clean_ >= growth_interval_) {
    scale_ = std::min(scale_ * 2, 1.0f * (1 << 24));
    clean_ = 0;
  }
  return true;
}

}  // namespace pstrain
