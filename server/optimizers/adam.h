#ifndef PSTRAIN_SERVER_OPTIMIZERS_ADAM_H_
#define PSTRAIN_SERVER_OPTIMIZERS_ADAM_H_

#include "server/optimizer.h"

namespace pstrain {

// Adam (Kingma & Ba) with L2 weight decay added to the gradient; state m, v:
//   g' = g + wd * w;  m = b1 * m + (1 - b1) * g';  v = b2 * v + (1 - b2) * g'^2
//   w -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
class Adam : public ElementwiseOptimizer {
 public:
  Adam(float b1, float b2, float eps, float wd) : b1_(b1), b2_(b2), eps_(eps), wd_(wd) {}

 protected:
  int Arrays() const override { return 2; }
  void UpdateRange(const UpdateContext& ctx, float* w, float* state, int64_t stride, const float* g,
                   int64_t n) const override;

 private:
  const float b1_, b2_, eps_, wd_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_OPTIMIZERS_ADAM_H_
