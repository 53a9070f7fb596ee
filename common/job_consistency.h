// The consistency rules of a job (DESIGN.md "Clocks and consistency"):
// the bound s of the gate and the read guarantee, the least clock a read
// for an iteration must see, the sparse tables' mode, and the modes of a
// running job as psctl set-consistency changes them.
#ifndef PSTRAIN_COMMON_JOB_CONSISTENCY_H_
#define PSTRAIN_COMMON_JOB_CONSISTENCY_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "proto/job.pb.h"

namespace pstrain {

// The bound s of the gate and the read guarantee; -1 means unbounded (ASP).
int64_t EffectiveStaleness(const JobSpec& job);
// The read guarantee for iteration `clock`: updates of iterations < this value
// must be applied before the read (0 when nothing is required).
int64_t MinClockForRead(const JobSpec& job, int64_t clock);
// The sparse tables' consistency (JobSpec.table_consistency, else the
// job's), fixed for the job, and the read guarantee of a pull of rows for
// iteration `clock` under it.
Consistency TableConsistency(const JobSpec& job);
int64_t TableMinClockForRead(const JobSpec& job, int64_t clock);

// The consistency of each iteration of a running job: the spec's, then each
// change (psctl set-consistency) from its clock on.
class ConsistencySchedule {
 public:
  explicit ConsistencySchedule(const JobSpec& job);
  // The changes so far, oldest first (ClusterStatus.consistency_changes).
  void Set(std::vector<ConsistencyChange> changes) { changes_ = std::move(changes); }
  const std::vector<ConsistencyChange>& changes() const { return changes_; }

  Consistency ConsistencyAt(int64_t clock) const;
  // The gate's and the read guarantee's bound for iteration `clock`; -1: none.
  int64_t StalenessAt(int64_t clock) const;
  // As MinClockForRead(job, clock), with the bound in force at `clock`.
  int64_t MinClockForRead(int64_t clock) const;
  // The newest mode asked for (the spec's when none).
  ConsistencyChange Latest() const;

 private:
  const ConsistencyChange* At(int64_t clock) const;  // null: the spec's

  ConsistencyChange base_;
  std::vector<ConsistencyChange> changes_;
};

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_JOB_CONSISTENCY_H_
