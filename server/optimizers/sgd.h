#ifndef PSTRAIN_SERVER_OPTIMIZERS_SGD_H_
#define PSTRAIN_SERVER_OPTIMIZERS_SGD_H_

#include "server/optimizer.h"

namespace pstrain {

// w -= lr * (g + wd * w)
class Sgd : public Optimizer {
 public:
  Sgd(float lr, float weight_decay) : lr_(lr), wd_(weight_decay) {}
  int StateSlots() const override { return 0; }
  void Update(float* w, float* state, const float* g, int64_t n,
              int64_t step) const override;

 private:
  float lr_, wd_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_OPTIMIZERS_SGD_H_
