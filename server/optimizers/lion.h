#ifndef PSTRAIN_SERVER_OPTIMIZERS_LION_H_
#define PSTRAIN_SERVER_OPTIMIZERS_LION_H_

#include "server/optimizer.h"

namespace pstrain {

// Lion (Chen et al., "Symbolic Discovery of Optimization Algorithms",
// 2023): the sign of an interpolation of the momentum and the gradient,
// with decoupled weight decay; one state array, m (4 bytes a parameter
// against Adam's 8):
//   w -= lr * (sign(b1 * m + (1 - b1) * g) + wd * w)
//   m = b2 * m + (1 - b2) * g
// sign(0) = 0, as torch.sign. Every step moves each weight by about lr, so
// its lr is typically 3-10x below AdamW's and its wd as much above.
class Lion : public ElementwiseOptimizer {
 public:
  Lion(float b1, float b2, float wd) : b1_(b1), b2_(b2), wd_(wd) {}

 protected:
  int Arrays() const override { return 1; }
  void UpdateRange(const UpdateContext& ctx, float* w, float* state, int64_t stride, const float* g,
                   int64_t n) const override;

 private:
  const float b1_, b2_, wd_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_OPTIMIZERS_LION_H_
