#ifndef PSTRAIN_SERVER_OPTIMIZERS_ADAM_H_
#define PSTRAIN_SERVER_OPTIMIZERS_ADAM_H_

#include "server/optimizer.h"

namespace pstrain {

// Adam (Kingma & Ba), with L2 weight decay added to the gradient:
//   g' = g + wd * w
//   m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g'^2
//   w -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
class Adam : public Optimizer {
 public:
  Adam(float lr, float beta1, float beta2, float eps, float weight_decay)
      : lr_(lr), b1_(beta1), b2_(beta2), eps_(eps), wd_(weight_decay) {}
  int StateSlots() const override { return 2; }
  void Update(float* w, float* state, const float* g, int64_t n,
              int64_t step) const override;

 private:
  float lr_, b1_, b2_, eps_, wd_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_OPTIMIZERS_ADAM_H_
