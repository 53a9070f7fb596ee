#include "common/job_consistency.h"

#include <algorithm>

namespace pstrain {

int64_t EffectiveStaleness(const JobSpec& job) {
  switch (job.consistency()) {
    case ASP:
      return -1;
    case SSP:
      return job.staleness();
    default:
      return 0;
  }
}

int64_t MinClockForRead(const JobSpec& job, int64_t clock) {
  const int64_t s = EffectiveStaleness(job);
  if (s < 0) return 0;
  return std::max<int64_t>(0, clock - s);
}

Consistency TableConsistency(const JobSpec& job) {
  const Consistency c = job.table_consistency();
  if (c != CONSISTENCY_UNSPECIFIED) return c;
  return job.consistency() == CONSISTENCY_UNSPECIFIED ? BSP : job.consistency();
}

int64_t TableMinClockForRead(const JobSpec& job, int64_t clock) {
  switch (TableConsistency(job)) {
    case ASP:
      return 0;
    case SSP:
      return std::max<int64_t>(0, clock - job.staleness());
    default:
      return std::max<int64_t>(0, clock);
  }
}

ConsistencySchedule::ConsistencySchedule(const JobSpec& job) {
  base_.set_consistency(job.consistency());
  base_.set_staleness(job.staleness());
}

const ConsistencyChange* ConsistencySchedule::At(int64_t clock) const {
  const ConsistencyChange* in_force = nullptr;
  for (const ConsistencyChange& c : changes_) {
    if (c.clock() <= clock) in_force = &c;
  }
  return in_force;
}

Consistency ConsistencySchedule::ConsistencyAt(int64_t clock) const {
  const ConsistencyChange* c = At(clock);
  return c == nullptr ? base_.consistency() : c->consistency();
}

int64_t ConsistencySchedule::StalenessAt(int64_t clock) const {
  const ConsistencyChange* c = At(clock);
  if (c == nullptr) c = &base_;
  return c->consistency() == ASP ? -1 : c->consistency() == SSP ? c->staleness() : 0;
}

int64_t ConsistencySchedule::MinClockForRead(int64_t clock) const {
  const int64_t s = StalenessAt(clock);
  return s < 0 ? 0 : std::max<int64_t>(0, clock - s);
}

ConsistencyChange ConsistencySchedule::Latest() const {
  return changes_.empty() ? base_ : changes_.back();
}

}  // namespace pstrain
