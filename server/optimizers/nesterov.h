#ifndef PSTRAIN_SERVER_OPTIMIZERS_NESTEROV_H_
#define PSTRAIN_SERVER_OPTIMIZERS_NESTEROV_H_

#include "server/optimizer.h"

namespace pstrain {

// Nesterov momentum (PyTorch's convention); state v:
//   g' = g + wd * w;  v = mu * v + g';  w -= lr * (g' + mu * v)
class Nesterov : public ElementwiseOptimizer {
 public:
  Nesterov(float mu, float wd) : mu_(mu), wd_(wd) {}

 protected:
  int Arrays() const override { return 1; }
  void UpdateRange(const UpdateContext& ctx, float* w, float* state, int64_t stride, const float* g,
                   int64_t n) const override;

 private:
  const float mu_, wd_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_OPTIMIZERS_NESTEROV_H_
