// The job's placement (proto/placement.proto) and its moves: a server
// added to the running job or drained from it. A move is asked for (Ask),
// planned (common/placement.h: only what balances the bytes moves) and
// given a switch clock that the gate holds: the workers train the clocks
// before it, then every server the move gives chunks or rows takes their
// state at that clock from the servers holding them (the handover,
// server/move_intake.h), and once every one of them holds its handover
// whole the move switches (MaybeSwitch): its placement is in force, and
// the job goes on from that clock under it (a new generation, not a
// rollback: nothing goes back, nothing is read from disk).
// A server lost before the switch, or a rollback, abandons the move
// (Abandon, ServerLost): the placement in force stays, and what the
// failure policy does with the lost server follows as without a move --
// no chunk is ever served under two placements at once, or by none. A
// server added by an abandoned move is out of the job (InJob): its loss
// changes nothing, and it is told to leave. Keeps the placement, the move
// under way and the moves ended. No I/O but logs.
//
// Not thread-safe: the coordinator's owner guards it.
#ifndef PSTRAIN_SCHEDULER_PLACEMENT_MOVES_H_
#define PSTRAIN_SCHEDULER_PLACEMENT_MOVES_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/partition.h"
#include "common/placement.h"
#include "proto/job.pb.h"
#include "proto/placement.pb.h"
#include "proto/scheduler_state.pb.h"
#include "proto/status.pb.h"

namespace pstrain {

class PlacementMoves {
 public:
  // `partition`: the job's chunks as every member cuts them (its servers
  // the initial placement's); `job` complete and valid.
  PlacementMoves(const JobSpec& job, Partition partition);

  // An EXTERNAL model's chunks, placed once a worker declared it (before
  // any move): the initial placement is theirs.
  void Placed(Partition partition);

  const Placement& placement() const { return state_.placement(); }
  bool moving() const { return state_.has_move(); }
  // The placement the move under way makes (null: none).
  const Placement* next() const { return moving() ? &state_.move().after() : nullptr; }
  // The clock the move under way switches at (-1: none).
  int64_t switch_clock() const { return moving() ? state_.move().switch_clock() : -1; }
  // The gate's clock held until then (-1: none): the one before the
  // switch clock. A worker computes the clock it asked the gate for while
  // the answer comes (worker/clock_loop.h), so held there each stops
  // having pushed it, and every chunk and row settles at the switch clock.
  int64_t held_clock() const { return moving() ? state_.move().switch_clock() - 1 : -1; }

  // What the job is doing when a move is asked for.
  struct Context {
    bool running = true;        // the job runs (not waiting, not ended)
    bool rolling_back = false;  // a rollback is under way
    int64_t switch_clock = 0;   // the clock the move switches at
    int64_t total_clocks = 0;   // the clocks the job trains (0: no bound)
    PlacementLimits limits;     // the servers' bytes per parameter and budgets
  };
  // Asks for server `server` to be added (ADD_SERVER) or drained
  // (DRAIN_SERVER), switching at context.switch_clock. FAILED_PRECONDITION
  // naming the reason for a job not running, rolling back or moving
  // already, one with pipeline stages or standby
  // copies (their layout does not follow a placement yet), a table that
  // admits rows by counts (admit_after: not kept by row), a placement
  // that leaves a server table rows but no chunk, one that ends before
  // the switch clock, the last server's drain,
  // a server added twice or drained without being there, a server's
  // budget broken; nothing changed then. INVALID_ARGUMENT for another
  // kind.
  absl::Status Ask(MoveKind kind, int server, const Context& context, absl::Time now);
  // True when the move under way switched now: every server it gives
  // chunks or rows holds its handover (`handed_over`, the coordinator's
  // reading of their Status); the placement is in force.
  bool MaybeSwitch(bool handed_over, absl::Time now);
  // The move that switched last handed over `bytes` in `ms` (its record's).
  void RecordHandover(int64_t bytes, int64_t ms);
  // Abandons the move under way for `why` (true when there was one): the
  // placement in force stays.
  bool Abandon(const std::string& why, absl::Time now);
  // Server `server` was lost (declared dead, replaced, or it failed): the
  // move under way is abandoned when it needs the server -- one that gives
  // or takes anything, or the one added or drained. True when it was.
  bool ServerLost(int server, absl::Time now);

  // Whether server `server` is in the job: the placement in force lists
  // it, or the move under way adds it. One out of it holds nothing: what
  // befalls it changes nothing else.
  bool InJob(int server) const;
  // Why server `server` is out of the job (the end of the last move of
  // it; empty when it is in).
  std::string WhyOut(int server) const;

  // The placement, the move under way (but the servers it waits for: the
  // coordinator's) and the moves ended.
  void AddStatus(ClusterStatus* out) const;
  // The durable part (SchedulerState.moves).
  const MoveState& Snapshot() const { return state_; }
  // INVALID_ARGUMENT (and nothing changed) for a placement, or a move's,
  // that does not fit the job's chunks.
  absl::Status Restore(const MoveState& state);

 private:
  // Ends the move under way, switched (`abandoned` empty) or not.
  void End(const std::string& abandoned, absl::Time now);
  // Why placement `after` cannot hold the job's tables (empty: it can): a
  // server with rows but no chunk would miss the checkpoints asked for,
  // which reach the servers with the workers' dense pushes.
  std::string RowsWithoutChunks(const Placement& after) const;
  const JobSpec job_;
  Partition partition_;
  MoveState state_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_PLACEMENT_MOVES_H_
