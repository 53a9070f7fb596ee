// What a server does about the rest of the cluster, as a plain class: the
// scheduler's heartbeat answers bring news (the job's state, workers
// declared dead, a rollback's generation and clock, the manifest's clock,
// a move under way) and Adopt acts on it through ServerActions: a dead
// worker leaves the BSP rounds and the read guarantee, a newer generation
// loads its checkpoint (or a move's switch: its handover) and ends the
// calls of the old one, a move is followed, a newer manifest prunes older
// checkpoint files. server_runtime.cc polls it; tests use fake actions.
#ifndef PSTRAIN_SERVER_MEMBER_LOOP_H_
#define PSTRAIN_SERVER_MEMBER_LOOP_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/cluster.pb.h"
#include "proto/member.pb.h"

namespace pstrain {

// The cluster as the scheduler last described it to this server.
struct ClusterNews {
  JobState job_state = WAITING;
  std::vector<int> dead_workers;
  int64_t generation = 0;
  int64_t restore_clock = 0;  // the rollback's checkpoint clock
  int64_t manifest_clock = 0;
  ServerRoutes routes;  // standby copies: who serves which chunks (empty: none)
  Placement placement;  // once a move changed it (version > 1; else version 0)
  std::string leave;    // why this server is out of the job (a drained one); empty: in it
  MoveNews move;        // the move under way (version 0: none)
};

// The store, the service and the checkpoint files, as the loop sees them.
class ServerActions {
 public:
  virtual ~ServerActions() = default;
  // The generation whose state the store holds.
  virtual int64_t generation() const = 0;
  // Worker `w` leaves the rounds and the read guarantee (again after a
  // restore: a no-op unless the shard was placed anew).
  virtual void RemoveWorker(int w) = 0;
  // Pulls parked on a read guarantee may now be answerable.
  virtual void WakePulls() = 0;
  // Loads the checkpoint of `clock` (0: the initial weights) as the state
  // of `generation`, its chunks placed by `placement` (a move's switch:
  // version > 1 and newer than the store's; else as before).
  virtual absl::Status Restore(int64_t generation, int64_t clock, const Placement& placement) = 0;
  // Ends the parked calls of generations before `generation` with `why`
  // (those of `generation` itself, parked since its restore, wait on).
  virtual void CancelParked(const absl::Status& why, int64_t generation) = 0;
  // Deletes checkpoint files older than `clock` (none without checkpoints).
  virtual void Prune(int64_t clock) = 0;
  // A move under way (`move`; version 0: none) of generation `generation`:
  // what it gives this server is taken from its holders
  // (server/move_intake.h).
  virtual void FollowMove(const MoveNews& move, int64_t generation) {}
  // Standby copies: serves, keeps standby copies of and ships changes
  // to whom `routes` say.
  virtual void SetRoutes(const ServerRoutes& routes) {}
};

// Not thread-safe: one loop calls Adopt.
class ServerMemberLoop {
 public:
  ServerMemberLoop(int num_workers, ServerActions* actions);

  // Acts on `news`. The job's end state (DONE or ABORTED) once it ended,
  // DONE once this server is out of the job (news.leave: a drained
  // server's part is done), nullopt while it runs, or the error of a
  // restore that failed.
  absl::StatusOr<std::optional<JobState>> Adopt(const ClusterNews& news);

 private:
  ServerActions* const actions_;
  std::vector<bool> removed_;
  int64_t pruned_before_ = 0;
  int64_t routes_version_ = -1;  // of the routes acted on
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_MEMBER_LOOP_H_
