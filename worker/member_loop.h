// What a worker does about the scheduler's news, as plain classes -- the
// counterpart of server/member_loop.h.
//
// WorkerMemberLoop takes the gate's answers (AdvanceClockResponse) for the
// clock loop (worker/clock_loop.h): the live workers (a dead one's share of
// the batch goes to the others; this worker's own death is an error), the
// job's end moved earlier (psctl drain), the checkpoint asked for, the
// consistency changes, a rollback (a newer generation: the loop resumes at
// the checkpoint's clock with clients of the new generation's servers) and
// a pipeline restart (a stage's newer link generation: it resumes where its
// replica restarts, on new links). It acts through LoopActions.
//
// WorkerWatch takes what a worker hears between gate answers (heartbeats'
// news, signals) for the runtime (worker/worker_runtime.cc): a signal or
// the job's abort stops the worker, and a stage blocked on a neighbour --
// which sees no gate -- has the waits on its links ended when its
// replica's pipeline restarts, or cancelled when the worker stops. It acts
// through WatchActions.
#ifndef PSTRAIN_WORKER_MEMBER_LOOP_H_
#define PSTRAIN_WORKER_MEMBER_LOOP_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/job_spec.h"
#include "proto/gate.pb.h"
#include "proto/member.pb.h"
#include "worker/ps_client.h"

namespace pstrain {

// The clock loop, as WorkerMemberLoop sees it.
class LoopActions {
 public:
  virtual ~LoopActions() = default;
  // The loop goes on from iteration `clock` (a rollback's or a restart's).
  virtual void ResumeAt(int64_t clock) = 0;
  // Clients of the servers of `cluster` for the current generation (the
  // first answer, and after a rollback); a stage links to its neighbours.
  virtual absl::Status Connect(const ClusterMembers& cluster) = 0;
  // A stage's replica restarted its pipeline: new links in `link_generation`.
  virtual absl::Status Relink(const ClusterMembers& cluster, int64_t link_generation) = 0;
  // What pushes carry from now on besides gradients.
  virtual void SetPushContext(const PushContext& context) = 0;
};

// The loop's thread calls everything but generation(), which is
// thread-safe (a parameter client's abandon check reads it).
class WorkerMemberLoop {
 public:
  // `job` complete and valid; this worker is `replica` of `stages`-stage
  // replicas (1: no pipeline), starting in `generation`. `actions` outlives
  // the loop.
  WorkerMemberLoop(const JobSpec& job, int replica, int stages, int64_t generation,
                   LoopActions* actions);

  // Takes a gate answer to a call made at iteration `clock` by a loop that
  // is `connected` (has clients) or not yet. True when the loop was sent
  // elsewhere (a rollback or a pipeline restart: ResumeAt was called).
  absl::StatusOr<bool> Adopt(const AdvanceClockResponse& gate, int64_t clock, bool connected);

  // The clock's global batch is split among the live replicas (workers,
  // without pipeline stages): this replica's share `*share_index` of `*num_shares`.
  // FAILED_PRECONDITION when this worker is no longer live.
  absl::Status BatchShare(int* num_shares, int* share_index) const;

  // A stage's clock that failed with `failure` may be saved by a restart
  // of its replica's pipeline (a link broke, timed out or was cancelled).
  static bool MayRelink(const absl::Status& failure);

  int64_t generation() const { return generation_; }
  int64_t link_generation() const { return link_generation_; }
  // The job's clocks: fewer once it drains.
  int64_t total() const { return total_; }
  const ConsistencySchedule& schedule() const { return schedule_; }
  const std::vector<int>& live() const { return live_; }

 private:
  PushContext CurrentPushContext() const;

  const JobSpec& job_;
  const int replica_, stages_;
  LoopActions* const actions_;
  std::atomic<int64_t> generation_;
  int64_t link_generation_ = 0;    // pipeline stages: the replica's links'
  int64_t placement_version_ = 0;  // of the cluster's placement last adopted (0: the initial)
  int64_t total_;
  int64_t checkpoint_asked_ = 0;  // AdvanceClockResponse.checkpoint_clock
  ConsistencySchedule schedule_;  // the job's, with the scheduler's changes
  std::vector<int> live_;         // the live workers, from the last answer
};

// What a worker hears between gate answers, polled.
struct WorkerNews {
  bool shutdown = false;  // the process was told to stop (a signal)
  JobState job_state = WAITING;
  int64_t link_generation = 0;  // its replica's, as heartbeats tell it
};

// The runtime, as WorkerWatch sees it.
class WatchActions {
 public:
  virtual ~WatchActions() = default;
  // Training ends (CANCELLED).
  virtual void Stop() = 0;
  // A stage's waits on its links end unless it links in `link_generation`.
  virtual void InterruptLinks(int64_t link_generation) = 0;
  // A stage's waits on its links end with `why`.
  virtual void CancelLinks(const absl::Status& why) = 0;
};

// Not thread-safe: one thread polls Step. `actions` outlives the watch.
class WorkerWatch {
 public:
  explicit WorkerWatch(WatchActions* actions) : actions_(actions) {}
  // Acts on `news`; true once the worker stopped (nothing more to do).
  bool Step(const WorkerNews& news);

 private:
  WatchActions* const actions_;
  bool stopped_ = false;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_MEMBER_LOOP_H_
