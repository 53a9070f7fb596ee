#ifndef PSTRAIN_SERVER_OPTIMIZERS_ADAGRAD_H_
#define PSTRAIN_SERVER_OPTIMIZERS_ADAGRAD_H_

#include "server/optimizer.h"

namespace pstrain {

// Adagrad (Duchi et al.); state s, the sum of squared gradients:
//   g' = g + wd * w;  s += g'^2;  w -= lr * g' / (sqrt(s) + eps)
class Adagrad : public ElementwiseOptimizer {
 public:
  Adagrad(float eps, float wd) : eps_(eps), wd_(wd) {}

 protected:
  int Arrays() const override { return 1; }
  void UpdateRange(const UpdateContext& ctx, float* w, float* state, int64_t stride, const float* g,
                   int64_t n) const override;

 private:
  const float eps_, wd_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_OPTIMIZERS_ADAGRAD_H_
