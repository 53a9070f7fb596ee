// A worker's place in a pipeline (job.pipeline_stages > 1): its stage's
// runner (worker/stage_runner.h) over the links to its neighbours — the
// stream the stage before opened to this worker's StageLinkService, and
// the stream this worker opens to the stage after, made again when the
// members name another address for it or the replica's pipeline
// restarted (a newer link generation: both links start over).
#ifndef PSTRAIN_WORKER_STAGE_WORKER_H_
#define PSTRAIN_WORKER_STAGE_WORKER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/member.pb.h"
#include "worker/models/model.h"
#include "worker/param_client.h"
#include "worker/stage_link.h"
#include "worker/stage_runner.h"

namespace pstrain {

class StageWorker {
 public:
  // `model` is worker `worker_id`'s stage; `service` serves this worker's
  // stream from the stage before (configured here). All outlive it.
  StageWorker(const JobSpec& job, int worker_id, DType wire_dtype, Model* model,
              StageLinkService* service);

  // Links to the stage after as `cluster` names it, in link generation `link_generation`
  // (on every list of members).
  absl::Status Connect(const ClusterMembers& cluster, int64_t link_generation);
  // A failed clock ends both links (the neighbours stop waiting on them).
  absl::StatusOr<StageClock> Step(int64_t clock, const Batch& batch, ParamBuffers* grads);
  absl::StatusOr<StepResult> Evaluate(int64_t tag, const Batch& batch);
  // Ends any wait for a neighbour with `why` (the worker stops: a neighbour
  // that hangs without its link breaking must not hang this one). Thread-safe.
  void Cancel(absl::Status why);
  // The replica's pipeline restarts in link generation `link generation`: unless this
  // worker links in it already, the waits on its links end. Thread-safe.
  void Interrupt(int64_t link_generation);

  int replica() const { return replica_; }
  bool last() const { return stage_ + 1 == stages_; }

 private:
  void CloseLinks(const absl::Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const JobSpec job_;
  const int worker_id_;
  const int stages_;
  const int replica_;
  const int stage_;
  Model* model_;
  StageLinkService* service_;
  std::string after_address_;
  absl::Mutex mu_;  // Connect's new links vs Cancel and Interrupt
  StageEndpoint endpoint_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<StageLinkClient> after_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<StageRunner> runner_;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_STAGE_WORKER_H_
