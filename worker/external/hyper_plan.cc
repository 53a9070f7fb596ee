#include "worker/external/hyper_plan.h"

#include <iterator>
#include <utility>

namespace pstrain {

void HyperPlan::Set(int64_t clock, std::string hyper) {
  absl::MutexLock lock(&mu_);
  if (clock <= last_set_) return;
  last_set_ = clock;
  if (AtLocked(clock) != hyper) changes_[clock] = std::move(hyper);
  // Forget what no clock kept can reach: every change before the one in
  // force kKeepClocks ago.
  auto in_force = changes_.upper_bound(clock - kKeepClocks);
  if (in_force != changes_.begin()) changes_.erase(changes_.begin(), std::prev(in_force));
}

std::string HyperPlan::At(int64_t clock) const {
  absl::MutexLock lock(&mu_);
  return AtLocked(clock);
}

std::string HyperPlan::AtLocked(int64_t clock) const {
  auto after = changes_.upper_bound(clock);
  if (after == changes_.begin()) return "";
  return std::prev(after)->second;
}

}  // namespace pstrain
