#ifndef PSTRAIN_SERVER_OPTIMIZERS_RMSPROP_H_
#define PSTRAIN_SERVER_OPTIMIZERS_RMSPROP_H_

#include "server/optimizer.h"

namespace pstrain {

// RMSProp (Tieleman & Hinton); state s, the running mean of squared gradients:
//   g' = g + wd * w;  s = rho * s + (1 - rho) * g'^2;  w -= lr * g' / (sqrt(s) + eps)
class RmsProp : public ElementwiseOptimizer {
 public:
  RmsProp(float rho, float eps, float wd) : rho_(rho), eps_(eps), wd_(wd) {}

 protected:
  int Arrays() const override { return 1; }
  void UpdateRange(const UpdateContext& ctx, float* w, float* state, int64_t stride, const float* g,
                   int64_t n) const override;

 private:
  const float rho_, eps_, wd_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_OPTIMIZERS_RMSPROP_H_
