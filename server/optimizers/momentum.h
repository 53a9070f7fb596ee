#ifndef PSTRAIN_SERVER_OPTIMIZERS_MOMENTUM_H_
#define PSTRAIN_SERVER_OPTIMIZERS_MOMENTUM_H_

#include "server/optimizer.h"

namespace pstrain {

// Heavy-ball momentum (PyTorch's convention):
//   v = mu * v + (g + wd * w);  w -= lr * v
class Momentum : public Optimizer {
 public:
  Momentum(float lr, float mu, float weight_decay) : lr_(lr), mu_(mu), wd_(weight_decay) {}
  int StateSlots() const override { return 1; }
  void Update(float* w, float* state, const float* g, int64_t n,
              int64_t step) const override;

 private:
  float lr_, mu_, wd_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_OPTIMIZERS_MOMENTUM_H_
