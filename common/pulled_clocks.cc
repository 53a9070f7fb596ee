#include "common/pulled_clocks.h"

#include <algorithm>

namespace pstrain {

void PulledClocks::Merge(const PulledClocks& other) {
  if (applied.empty()) {
    applied = other.applied;
  } else {
    for (size_t w = 0; w < applied.size() && w < other.applied.size(); ++w) {
      applied[w] = std::min(applied[w], other.applied[w]);
    }
  }
  own_applied_most = std::max(own_applied_most, other.own_applied_most);
  own_held_least = std::min(own_held_least, other.own_held_least);
}

}  // namespace pstrain
