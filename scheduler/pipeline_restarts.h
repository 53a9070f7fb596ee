// Pipeline replicas' links (--on_worker_failure=wait with pipeline stages):
// every replica has a link generation. A stage that died, was replaced, or whose
// links broke starts a restart of its replica: the link generation moves up, and the
// replica's gate calls are held until every one of its stages is live and
// at the gate; then they all go back to the replica's slowest clock and
// link anew in the new link generation. A rollback moves every replica's link generation up.
// This class keeps the link generations and the restarts; JobCoordinator holds the
// calls and moves the clocks. No I/O but logs.
//
// Not thread-safe: the coordinator's owner guards it.
#ifndef PSTRAIN_SCHEDULER_PIPELINE_RESTARTS_H_
#define PSTRAIN_SCHEDULER_PIPELINE_RESTARTS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/member.pb.h"
#include "proto/scheduler_state.pb.h"
#include "proto/status.pb.h"
#include "scheduler/membership.h"

namespace pstrain {

class PipelineRestarts {
 public:
  // `stages` per replica (1: no pipeline, and no replicas here).
  PipelineRestarts(int num_workers, int stages);

  bool pipelined() const { return stages_ > 1; }
  int stages() const { return stages_; }
  int ReplicaOf(int worker) const;
  // Workers [first_worker, first_worker + stages) make up `replica`.
  int first_worker(int replica) const { return replica * stages_; }
  int64_t link_generation(int replica) const { return state_.replicas(replica).link_generation(); }
  bool restarting(int replica) const { return state_.replicas(replica).restarting(); }

  // Starts a restart of `replica` for `why` (its link generation moves up),
  // unless one is under way.
  void Begin(int replica, const std::string& why, absl::Time now);
  // The stages of `replica` that its restart still waits for: registered,
  // live (not DEAD) and `at_gate`.
  std::vector<std::string> Pending(int replica, const Membership& members,
                                   const std::function<bool(int worker)>& at_gate) const;
  // `replica`'s restart is over: its stages restart `clock`.
  void End(int replica, int64_t clock, absl::Time now);
  // A rollback to `clock`: every replica links anew; a restart under way is
  // part of the rollback (it ends there).
  void RolledBack(int64_t clock, absl::Time now);
  // The first replica whose restart began more than `timeout` ago.
  std::optional<int> Overdue(absl::Time now, absl::Duration timeout) const;

  // One Wait per restart under way.
  void AddWaits(const Membership& members, const std::function<bool(int worker)>& at_gate,
                MemberStatus* out) const;
  // Every restart so far, oldest first (ClusterStatus.pipeline_restarts).
  const google::protobuf::RepeatedPtrField<PipelineRestart>& restarts() const {
    return state_.restarts();
  }

  // Its part of the cluster's status: the restarts.
  void AddStatus(ClusterStatus* out) const { *out->mutable_pipeline_restarts() = restarts(); }

  // The durable part (SchedulerState.pipelines).
  const PipelineRestartState& Snapshot() const { return state_; }
  // INVALID_ARGUMENT (and nothing changed) when it is not one entry per
  // replica or an link generation is negative.
  absl::Status Restore(const PipelineRestartState& state);

 private:
  const int stages_;
  PipelineRestartState state_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_PIPELINE_RESTARTS_H_
