#include "server/update_rules.h"

#include <utility>

#include "common/job_optimizer.h"

namespace pstrain {

UpdateRules::UpdateRules(const OptimizerSpec& job, int64_t total_clocks,
                         std::shared_ptr<const Optimizer> base)
    : job_(job), schedule_(job, total_clocks), base_(std::move(base)) {}

UpdateRules::Rule UpdateRules::For(int64_t clock, const OptimizerSpec* hyper) const {
  if (hyper == nullptr) return {base_, schedule_.At(clock)};
  const float lr = hyper->has_learning_rate() ? hyper->learning_rate() : schedule_.At(clock);
  OptimizerSpec rest = *hyper;
  rest.clear_learning_rate();
  if (rest.ByteSizeLong() == 0) return {base_, lr};
  const std::string key = rest.SerializeAsString();
  absl::MutexLock lock(&mu_);
  if (key != last_key_ || last_ == nullptr) {
    // Checked by WithHyper when the push came: valid.
    last_ = *MakeOptimizer(*WithHyper(job_, rest));
    last_key_ = key;
  }
  return {last_, lr};
}

}  // namespace pstrain
