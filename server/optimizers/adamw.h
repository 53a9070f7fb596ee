#ifndef PSTRAIN_SERVER_OPTIMIZERS_ADAMW_H_
#define PSTRAIN_SERVER_OPTIMIZERS_ADAMW_H_

#include "server/optimizer.h"

namespace pstrain {

// AdamW (Loshchilov & Hutter): Adam with decoupled weight decay; state m, v:
//   m = b1 * m + (1 - b1) * g;  v = b2 * v + (1 - b2) * g^2
//   w -= lr * ((m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + wd * w)
class AdamW : public ElementwiseOptimizer {
 public:
  AdamW(float b1, float b2, float eps, float wd) : b1_(b1), b2_(b2), eps_(eps), wd_(wd) {}

 protected:
  int Arrays() const override { return 2; }
  void UpdateRange(const UpdateContext& ctx, float* w, float* state, int64_t stride, const float* g,
                   int64_t n) const override;

 private:
  const float b1_, b2_, eps_, wd_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_OPTIMIZERS_ADAMW_H_
