// Dynamic loss scaling for fp16 compute: the loss's gradient is multiplied by
// scale() before the backward so that small gradients survive fp16, and
// Unscale divides the gradients by it again. A non-finite gradient (an
// overflow) halves the scale and the step is skipped; after
// `growth_interval` clean steps in a row the scale doubles.
#ifndef PSTRAIN_WORKER_MODELS_LOSS_SCALER_H_
#define PSTRAIN_WORKER_MODELS_LOSS_SCALER_H_

#include <cstdint>
#include <vector>

namespace pstrain {

class LossScaler {
 public:
  explicit LossScaler(float initial = 65536.0f, int growth_interval = 200)
      : scale_(initial), growth_interval_(growth_interval) {}

  float scale() const { return scale_; }
  int64_t overflows() const { return overflows_; }

  // Divides `grads` by scale() in place and returns true when every value is
  // finite; otherwise leaves them, halves the scale (not below 1) and
  // returns false: skip this step.
  bool Unscale(std::vector<std::vector<float>>* grads);

 private:
  float scale_;
  const int growth_interval_;
  int clean_ = 0;
  int64_t overflows_ = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_MODELS_LOSS_SCALER_H_
