// Rollbacks and the manifest. While the job runs with checkpoints, a
// server that dies or is replaced starts a rollback: a new generation whose
// clock is the newest complete checkpoint set (bounded by the furthest
// worker); every server loads it, every worker resumes at it, and the gates
// stay shut until each server reports the new generation restored. The
// manifest names the newest clock every chunk server has a checkpoint of.
// This class keeps the generation, the rollbacks and the manifest's clock;
// JobCoordinator moves the clocks and answers the held calls. No I/O but
// the catalog and logs.
//
// Not thread-safe: the coordinator's owner guards it.
#ifndef PSTRAIN_SCHEDULER_ROLLBACKS_H_
#define PSTRAIN_SCHEDULER_ROLLBACKS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/job.pb.h"
#include "proto/scheduler_state.pb.h"
#include "proto/status.pb.h"
#include "scheduler/membership.h"

namespace pstrain {

// The checkpoint directory, as far as the scheduler needs it.
class CheckpointCatalog {
 public:
  virtual ~CheckpointCatalog() = default;
  // The newest clock <= at_most of which every server of `servers` has a
  // complete checkpoint file; 0 when none.
  virtual int64_t NewestCompleteSet(const std::vector<int>& servers, int64_t at_most) = 0;
};

class Rollbacks {
 public:
  // `catalog` (used only with checkpoints) must outlive this;
  // `chunk_servers`: the servers that hold chunks (and write checkpoints);
  // `start_clock`: the clock the job starts from (the manifest's, when
  // resuming).
  Rollbacks(const JobSpec& job, std::vector<int> chunk_servers, CheckpointCatalog* catalog,
            int64_t start_clock);

  int64_t generation() const { return state_.generation(); }
  // The job writes checkpoints (a rollback goes back to one, not to clock 0).
  bool checkpoints() const { return checkpoint_every_ > 0; }
  // The clock the current generation started from.
  int64_t restore_clock() const { return state_.restore_clock(); }
  // Some server has not restored the current generation yet.
  bool rolling_back() const { return state_.rolling_back(); }
  int64_t manifest_clock() const { return state_.manifest_clock(); }
  const std::vector<int>& chunk_servers() const { return chunk_servers_; }
  // The servers that hold chunks once an EXTERNAL model is declared (its
  // chunks are placed then); before the job runs.
  void SetChunkServers(std::vector<int> servers) { chunk_servers_ = std::move(servers); }
  const google::protobuf::RepeatedPtrField<Rollback>& history() const { return state_.history(); }

  // Starts the next generation for `reason`; `from`: the furthest worker's
  // clock; `redo`: asked for by a replacement (Rollback.redo). The clock
  // every member goes back to: the newest complete checkpoint set at most
  // `from` (the manifest's at least; 0 without checkpoints).
  int64_t Begin(const std::string& reason, int64_t from, absl::Time now, bool redo = false);
  // A move's switch (scheduler/placement_moves.h), not a rollback: the
  // next generation starts at `clock` -- the checkpoint the manifest names,
  // which every server restores under placement `placement_version` --
  // recorded in the history with that version (Rollback.placement_version).
  void Switch(const std::string& reason, int64_t clock, int64_t placement_version, absl::Time now);
  // Ends the rollback under way once every server in the job (`in_job`;
  // null: every one) is live and has restored the current generation;
  // true when it ended now.
  bool MaybeEnd(const Membership& members, absl::Time now,
                const std::function<bool(int server)>& in_job = nullptr);

  // A manifest to write (the newest clock every chunk server of the current
  // generation has written a checkpoint of), at most one at a time until
  // ManifestWritten.
  std::optional<int64_t> TakeManifestToWrite(const Membership& members);
  // The manifest of `clock` was written (or not: `status`, logged once);
  // true when it was.
  bool ManifestWritten(int64_t clock, const absl::Status& status);

  // While rolling back: what it waits for.
  void AddWait(const Membership& members, MemberStatus* out) const;

  // Its part of the cluster's status: the generation, the rollbacks, the
  // manifest's clock.
  void AddStatus(ClusterStatus* out) const;

  // The durable part (SchedulerState.rollbacks).
  const RollbackState& Snapshot() const { return state_; }
  // INVALID_ARGUMENT (and nothing changed) when a clock is outside
  // [0, max_clock], the generation negative, or a rollback under way is
  // not in the history. The manifest's clock never moves back.
  absl::Status Restore(const RollbackState& state, int64_t max_clock);

 private:
  const int64_t checkpoint_every_;
  const std::string checkpoint_dir_;
  std::vector<int> chunk_servers_;
  CheckpointCatalog* const catalog_;
  RollbackState state_;
  bool manifest_in_flight_ = false;
  bool manifest_error_logged_ = false;
};

}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_ROLLBACKS_H_
