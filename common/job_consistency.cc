#include "common/job_consistency.h"

#include <algorithm>

namespace pstrain {

int64_t EffectiveStaleness(Consistency consistency, int64_t staleness) {
  switch (consistency) {
    case ASP:
      return -1;
    case SSP:
      return staleness;
    default:
      return 0;
  }
}

int64_t EffectiveStaleness(const JobSpec& job) {
  return EffectiveStaleness(job.consistency(), job.staleness());
}

int64_t MinClockForRead(int64_t clock, int64_t staleness) {
  if (staleness < 0) return 0;
  return std::max<int64_t>(0, clock - staleness);
}

Consistency TableConsistency(const JobSpec& job) {
  const Consistency c = job.table_consistency();
  if (c != CONSISTENCY_UNSPECIFIED) return c;
  return job.consistency() == CONSISTENCY_UNSPECIFIED ? BSP : job.consistency();
}

int64_t TableMinClockForRead(const JobSpec& job, int64_t clock) {
  return MinClockForRead(clock, EffectiveStaleness(TableConsistency(job), job.staleness()));
}

ConsistencySchedule::ConsistencySchedule(const JobSpec& job)
    : changes_(job.consistency_plan().begin(), job.consistency_plan().end()) {
  base_.set_consistency(job.consistency());
  base_.set_staleness(job.staleness());
}

bool EverStale(const JobSpec& job) {
  if (EffectiveStaleness(job) != 0) return true;
  for (const ConsistencyChange& c : job.consistency_plan()) {
    if (EffectiveStaleness(c.consistency(), c.staleness()) != 0) return true;
  }
  return false;
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
  return EffectiveStaleness(c->consistency(), c->staleness());
}

int64_t ConsistencySchedule::MinClockForRead(int64_t clock) const {
  return pstrain::MinClockForRead(clock, StalenessAt(clock));
}

ConsistencyChange ConsistencySchedule::Latest() const {
  return changes_.empty() ? base_ : changes_.back();
}

absl::Status CheckConsistencyChange(Consistency consistency, int64_t staleness) {
  if (consistency != BSP && consistency != SSP && consistency != ASP) {
    return absl::InvalidArgumentError("consistency: expected BSP, SSP or ASP");
  }
  if (consistency == SSP ? staleness < 0 : staleness != 0) {
    return absl::InvalidArgumentError(
        "staleness " + std::to_string(staleness) + ": SSP takes a bound >= 0, BSP and ASP none");
  }
  return absl::OkStatus();
}

bool ConsistencyIsFixed(const JobSpec& job) {
  const bool bsp = job.consistency() == BSP || job.consistency() == CONSISTENCY_UNSPECIFIED;
  return job.pipeline_stages() > 1 || (bsp && job.optimizer().clip_norm() > 0);
}

}  // namespace pstrain
