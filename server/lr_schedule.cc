#include "server/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace pstrain {

Schedule::Schedule(const OptimizerSpec& spec, int64_t total_clocks)
    : spec_(spec.schedule()),
      lr_(spec.learning_rate()),
      decay_clocks_(spec.schedule().decay_clocks() > 0
                       ? spec.schedule().decay_clocks()
                       : std::max<int64_t>(1, total_clocks - spec.schedule().warmup_clocks())) {}

float Schedule::At(int64_t clock) const {
  const double t = static_cast<double>(std::max<int64_t>(0, clock));
  switch (spec_.type()) {
    case WARMUP_COSINE: {
      const double warmup = static_cast<double>(spec_.warmup_clocks());
      if (t < warmup) return static_cast<float>(lr_ * (t + 1) / warmup);
      const double p = std::min(1.0, (t - warmup) / static_cast<double>(decay_clocks_));
      const double min_lr = spec_.min_lr();
      return static_cast<float>(min_lr + (lr_ - min_lr) * 0.5 * (1 + std::cos(M_PI * p)));
    }
    case STEP_DECAY:
      return static_cast<float>(lr_ *
                                std::pow(static_cast<double>(spec_.gamma()),
                                         std::floor(t / static_cast<double>(spec_.step_size()))));
    default:
      return lr_;
  }
}

}  // namespace pstrain
