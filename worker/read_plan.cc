#include "worker/read_plan.h"

#include <algorithm>

namespace pstrain {

WeightSource ReadPlan::Source(int64_t clock, bool connected, bool prefetched) const {
  if (!connected) return WeightSource::kPullAfterGate;
  if (prefetched) return WeightSource::kPrefetch;
  if (CacheServes(clock)) return WeightSource::kCache;
  return overlap_ ? WeightSource::kPullWithGate : WeightSource::kPullAfterGate;
}

bool ReadPlan::AwaitsGate(bool connected) const {
  return stages_ > 1 || !connected;
}

bool ReadPlan::CacheServes(int64_t clock) const {
  return schedule_->StalenessAt(clock) > 0 && fresh_ >= 0 &&
         fresh_ >= schedule_->MinClockForRead(clock);
}

void ReadPlan::Note(const std::vector<int64_t>& applied, const std::vector<int>& live) {
  fresh_ = -1;
  for (int w : live) {
    if (w >= static_cast<int>(applied.size())) {
      fresh_ = -1;
      return;
    }
    fresh_ = fresh_ < 0 ? applied[w] : std::min(fresh_, applied[w]);
  }
}

}  // namespace pstrain
