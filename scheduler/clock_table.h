// The clock table: per worker, the iterations it has finished, and the gate
// that bounds how far ahead any worker may run. Knows nothing of gRPC.
#ifndef PSTRAIN_SCHEDULER_CLOCK_TABLE_H_
#define PSTRAIN_SCHEDULER_CLOCK_TABLE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "proto/gate.pb.h"
#include "proto/scheduler_state.pb.h"
#include "proto/status.pb.h"

namespace pstrain {

// Not thread-safe; the scheduler guards it.
class ClockTable {
 public:
  // `staleness` is the bound s (0 for BSP); a negative value means unbounded
  // (ASP).
  ClockTable(int num_workers, int64_t staleness);

  // Records that `worker` has finished `clock` iterations. A clock moves up
  // by one at a time; repeating the current value is a no-op (a retry).
  // INVALID_ARGUMENT for an unknown worker or any other value.
  absl::Status Advance(int worker, int64_t clock);
  // A table restored from a scheduler's state file: `clocks` as of its last
  // write, which the workers may have passed since, so each worker's next
  // Advance may move its clock up by any amount (once).
  void Restore(const std::vector<int64_t>& clocks, const std::vector<bool>& removed);
  // The same from the durable part (SchedulerState.clocks). INVALID_ARGUMENT
  // (and nothing changed) when it is not one entry per worker or a clock is
  // outside [0, max_clock].
  absl::Status Restore(const ClockTableState& state, int64_t max_clock);
  ClockTableState Snapshot() const;
  // Its part of the cluster's status: each worker's clock (-1: removed).
  void AddStatus(ClusterStatus* out) const;
  // After a Restore: `worker` said (in a heartbeat) it finished `clock`
  // iterations, which its gate reports may take a while to say (they lag
  // the heartbeats by a clock or more). Moves it up to `clock` once; its
  // reports up to `clock` are then no-ops. False if it may not jump.
  bool CatchUp(int worker, int64_t clock);
  // `worker` finished the job at `clock` (its final report): the table
  // says so even if a gate report of its last clocks was lost (a scheduler
  // restarting as it sent them). Never moves a clock down.
  void Finish(int worker, int64_t clock);
  // Whether `worker`'s next Advance may still jump (Restore).
  bool may_jump(int worker) const { return may_jump_[worker]; }
  // Some live worker's clock is not known yet since a Restore.
  bool Resyncing() const;

  // `worker` knows its pushes of its first `pushed` iterations acknowledged
  // by every server (AdvanceClockRequest.pushed_clock). Kept as the most
  // it said, never above its clock.
  void NotePushed(int worker, int64_t pushed);
  // Where a replacement of `worker` (or the worker itself, restarted)
  // starts: the iterations whose pushes are known to have landed. A
  // push the worker made later may have died with it; the replacement
  // repeats it (a server takes a repeat of a push it has as a duplicate).
  // Rewinds the worker's clock there.
  int64_t RestartPoint(int worker);

  // The gate: may a worker start iteration `clock`? True when every worker
  // not removed has finished at least clock - s iterations (always under ASP).
  bool MayStart(int64_t clock) const { return MayStart(clock, staleness_); }
  // The same under bound `staleness` (-1: none), for a job whose bound changed.
  bool MayStart(int64_t clock, int64_t staleness) const;

  // Leaves `worker` out of the gate and of SlowestClock from now on (it died).
  void Remove(int worker);
  // Sets every worker's clock to `clock` (a rollback to a checkpoint).
  void Reset(int64_t clock);
  // Sets `worker`'s clock back to `clock` (at most its own): its pipeline
  // replica restarts that clock.
  void Rewind(int worker, int64_t clock);
  bool removed(int worker) const { return removed_[worker]; }

  // Min over the workers not removed (0 when none is left).
  int64_t SlowestClock() const;
  int64_t clock(int worker) const { return clocks_[worker]; }
  int num_workers() const { return static_cast<int>(clocks_.size()); }

 private:
  std::vector<int64_t> clocks_;
  std::vector<int64_t> pushed_;  // NotePushed; at most clocks_
  std::vector<bool> removed_;
  std::vector<bool> may_jump_;   // Restore: the next Advance may move up by more than one
  std::vector<bool> caught_up_;  // CatchUp: reports at or below the clock are no-ops
  int64_t staleness_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_CLOCK_TABLE_H_
