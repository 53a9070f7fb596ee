#include "server/nonfinite.h"

#include "common/dtype.h"
#include "common/logging.h"

namespace pstrain {

bool NonfiniteRule::Admits(absl::Span<const float> grads, int worker, int64_t clock,
                           absl::FunctionRef<std::string()> what) {
  if (allow_ || AllFinite(grads.data(), static_cast<int64_t>(grads.size()))) return true;
  const int64_t skipped = skipped_.fetch_add(1, std::memory_order_relaxed) + 1;
  int64_t held_back = 0;
  if (log_.Allow(&held_back)) {
    spdlog::warn("{}: skipped worker {}'s gradients of clock {}: they hold a NaN or an Inf "
                 "(optimizer.allow_nonfinite is off); {} skipped so far{}",
                 what(), worker, clock, skipped,
                 held_back > 0 ? fmt::format(", {} such lines held back", held_back) : "");
  }
  return false;
}

}  // namespace pstrain
