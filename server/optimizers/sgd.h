#ifndef PSTRAIN_SERVER_OPTIMIZERS_SGD_H_
#define PSTRAIN_SERVER_OPTIMIZERS_SGD_H_

#include "server/optimizer.h"

namespace pstrain {

// SGD with L2 weight decay:
//   w -= lr * (g + wd * w)
class Sgd : public ElementwiseOptimizer {
 public:
  explicit Sgd(float wd) : wd_(wd) {}

 protected:
  int Arrays() const override { return 0; }
  void UpdateRange(const UpdateContext& ctx, float* w, float* state, int64_t stride, const float* g,
                   int64_t n) const override;

 private:
  const float wd_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_OPTIMIZERS_SGD_H_
