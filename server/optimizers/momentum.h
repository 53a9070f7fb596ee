#ifndef PSTRAIN_SERVER_OPTIMIZERS_MOMENTUM_H_
#define PSTRAIN_SERVER_OPTIMIZERS_MOMENTUM_H_

#include "server/optimizer.h"

namespace pstrain {

// Heavy-ball momentum (PyTorch's convention); state v:
//   g' = g + wd * w;  v = mu * v + g';  w -= lr * v
class Momentum : public ElementwiseOptimizer {
 public:
  Momentum(float mu, float wd) : mu_(mu), wd_(wd) {}

 protected:
  int Arrays() const override { return 1; }
  void UpdateRange(const UpdateContext& ctx, float* w, float* state, int64_t stride, const float* g,
                   int64_t n) const override;

 private:
  const float mu_, wd_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_OPTIMIZERS_MOMENTUM_H_
