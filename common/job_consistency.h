// The consistency rules of a job (DESIGN.md "Clocks and consistency"):
// the bound s of the gate and the read guarantee, the least clock a read
// for an iteration must see, the sparse tables' mode, and the modes of a
// running job as psctl set-consistency changes them, and which modes a
// running job may change to (CheckConsistencyChange, ConsistencyIsFixed:
// the one place both the job's plan and psctl's request are checked).
//
// Each rule is decided in one function: EffectiveStaleness(consistency,
// staleness) for the bound, MinClockForRead(clock, staleness) for the read
// guarantee. The others only choose their inputs (the spec's mode, the
// mode in force at a clock, the tables' mode).
#ifndef PSTRAIN_COMMON_JOB_CONSISTENCY_H_
#define PSTRAIN_COMMON_JOB_CONSISTENCY_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "proto/job.pb.h"

namespace pstrain {

// The bound s of the gate and the read guarantee under `consistency` with
// SSP's bound `staleness`: 0 under BSP (and an unset mode), `staleness`
// under SSP, -1 (unbounded) under ASP. Thread-safe.
int64_t EffectiveStaleness(Consistency consistency, int64_t staleness);
// EffectiveStaleness of the spec's own mode (JobSpec.consistency and
// staleness), before any change a running job takes.
int64_t EffectiveStaleness(const JobSpec& job);

// Whether any iteration of the job reads stale weights as it starts: its
// spec's mode or a planned change (JobSpec.consistency_plan) has a bound
// other than 0. (psctl set-consistency may make a BSP job stale later.)
bool EverStale(const JobSpec& job);

// The read guarantee for iteration `clock` under the bound `staleness` (as
// EffectiveStaleness gives it; < 0: unbounded): updates of iterations below
// the result must be applied before the read; 0 when nothing is required.
// Thread-safe.
int64_t MinClockForRead(int64_t clock, int64_t staleness);

// The sparse tables' consistency (JobSpec.table_consistency, else the
// job's, else BSP), fixed for the job, and the read guarantee of a pull of
// rows for iteration `clock` under it (with the job's staleness).
Consistency TableConsistency(const JobSpec& job);
int64_t TableMinClockForRead(const JobSpec& job, int64_t clock);

// Whether a change to `consistency` with SSP's bound `staleness` is one a
// job can take: BSP, SSP or ASP; SSP with a staleness >= 0, BSP and ASP
// with none. InvalidArgument naming the rule otherwise.
absl::Status CheckConsistencyChange(Consistency consistency, int64_t staleness);
// Whether the job keeps the consistency it starts with (no plan, no psctl
// set-consistency): a pipelined job, and a BSP job with clip_norm (its
// clipping needs every worker's norm each round).
bool ConsistencyIsFixed(const JobSpec& job);

// The consistency of each iteration of a running job: the spec's, then each
// change (the job's consistency_plan, then psctl set-consistency's) from
// its clock on. Not thread-safe: Set
// must not run beside any other call; the const calls may run together.
class ConsistencySchedule {
 public:
  explicit ConsistencySchedule(const JobSpec& job);
  // The changes so far, oldest first (ClusterStatus.consistency_changes).
  void Set(std::vector<ConsistencyChange> changes) { changes_ = std::move(changes); }
  const std::vector<ConsistencyChange>& changes() const { return changes_; }

  Consistency ConsistencyAt(int64_t clock) const;
  // EffectiveStaleness of the mode in force at `clock`: the gate's and the
  // read guarantee's bound for iteration `clock`; -1: none.
  int64_t StalenessAt(int64_t clock) const;
  // MinClockForRead(clock, StalenessAt(clock)).
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
