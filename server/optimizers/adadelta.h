#ifndef PSTRAIN_SERVER_OPTIMIZERS_ADADELTA_H_
#define PSTRAIN_SERVER_OPTIMIZERS_ADADELTA_H_

#include "server/optimizer.h"

namespace pstrain {

// Adadelta (Zeiler); state s (mean squared gradient) and u (mean squared step):
//   g' = g + wd * w;  s = rho * s + (1 - rho) * g'^2
//   d = sqrt(u + eps) / sqrt(s + eps) * g';  u = rho * u + (1 - rho) * d^2
//   w -= lr * d
class Adadelta : public ElementwiseOptimizer {
 public:
  Adadelta(float rho, float eps, float wd) : rho_(rho), eps_(eps), wd_(wd) {}

 protected:
  int Arrays() const override { return 2; }
  void UpdateRange(const UpdateContext& ctx, float* w, float* state, int64_t stride, const float* g,
                   int64_t n) const override;

 private:
  const float rho_, eps_, wd_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_OPTIMIZERS_ADADELTA_H_
