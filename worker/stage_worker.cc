#include "worker/stage_worker.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/stage_plan.h"
#include "common/status_macros.h"

namespace pstrain {

StageWorker::StageWorker(const JobSpec& job, int worker_id, DType wire_dtype, Model* model,
                         StageLinkService* service)
    : job_(job),
      worker_id_(worker_id),
      stages_(job.pipeline_stages()),
      model_(model),
      service_(service) {
  endpoint_.replica = ReplicaOf(worker_id, stages_);
  endpoint_.stage = StageOf(worker_id, stages_);
  endpoint_.wire_dtype = wire_dtype;
  endpoint_.inbox = std::max(8, job.micro_batches());
  if (endpoint_.stage > 0) service_->Configure(endpoint_);
}

absl::Status StageWorker::Connect(const ClusterView& cluster) {
  StreamChannel* after = nullptr;
  if (!last()) {
    const int next = worker_id_ + 1;
    if (next >= cluster.workers_size()) {
      return absl::FailedPreconditionError("the cluster view lacks the next pipeline stage");
    }
    const std::string& address = cluster.workers(next).address();
    absl::MutexLock lock(&cancel_mu_);
    if (after_ == nullptr || address != after_address_) {
      after_.reset();
      after_ = std::make_unique<StageLinkClient>(endpoint_, address);
      after_address_ = address;
    }
    after = after_->after();
  }
  runner_ =
      std::make_unique<StageRunner>(model_, job_.pipeline_schedule(), endpoint_.stage, stages_,
                                    endpoint_.stage > 0 ? service_->before() : nullptr, after);
  return absl::OkStatus();
}

void StageWorker::Cancel(absl::Status why) {
  if (endpoint_.stage > 0 && service_->before() != nullptr) service_->before()->Close(why);
  absl::MutexLock lock(&cancel_mu_);
  if (after_ != nullptr) after_->Abort(why);
}

absl::StatusOr<StageClock> StageWorker::Step(int64_t clock, const Batch& batch,
                                             ParamBuffers* grads) {
  if (runner_ == nullptr) return absl::FailedPreconditionError("the pipeline is not linked yet");
  return runner_->RunClock(clock, batch, job_.micro_batches(), grads);
}

absl::StatusOr<StepResult> StageWorker::Evaluate(int64_t tag, const Batch& batch) {
  if (runner_ == nullptr) return absl::FailedPreconditionError("the pipeline is not linked yet");
  return runner_->Evaluate(tag, batch);
}

}  // namespace pstrain
