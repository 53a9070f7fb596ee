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
      replica_(ReplicaOf(worker_id, stages_)),
      stage_(StageOf(worker_id, stages_)),
      model_(model),
      service_(service) {
  endpoint_.replica = replica_;
  endpoint_.stage = stage_;
  endpoint_.wire_dtype = wire_dtype;
  endpoint_.inbox = std::max(8, job.micro_batches());
  if (stage_ > 0) service_->Configure(endpoint_);
}

absl::Status StageWorker::Connect(const ClusterMembers& cluster, int64_t link_generation) {
  StreamChannel* after = nullptr;
  absl::MutexLock lock(&mu_);
  const bool restarted = link_generation != endpoint_.link_generation;
  endpoint_.link_generation = link_generation;
  if (stage_ > 0 && restarted) service_->before()->Reset(link_generation);
  if (!last()) {
    const int next = worker_id_ + 1;
    if (next >= cluster.workers_size()) {
      return absl::FailedPreconditionError("the members lack the next pipeline stage");
    }
    const std::string& address = cluster.workers(next).address();
    if (after_ == nullptr || address != after_address_ || restarted) {
      if (after_ != nullptr) after_->Abort(absl::AbortedError("the pipeline restarts"));
      after_.reset();
      after_ = std::make_unique<StageLinkClient>(endpoint_, address);
      after_address_ = address;
    }
    after = after_->after();
  }
  runner_ = std::make_unique<StageRunner>(model_, job_.pipeline_schedule(), stage_, stages_,
                                          stage_ > 0 ? service_->before() : nullptr, after);
  return absl::OkStatus();
}

void StageWorker::Cancel(absl::Status why) {
  absl::MutexLock lock(&mu_);
  CloseLinks(why);
}

void StageWorker::Interrupt(int64_t link_generation) {
  absl::MutexLock lock(&mu_);
  if (link_generation <= endpoint_.link_generation) return;
  CloseLinks(absl::AbortedError(absl::StrCat(
      "replica ", replica_, "'s pipeline restarts (link generation ", link_generation, ")")));
}

void StageWorker::CloseLinks(const absl::Status& why) {
  if (stage_ > 0 && service_->before() != nullptr) service_->before()->Close(why);
  if (after_ != nullptr) after_->Abort(why);
}

absl::StatusOr<StageClock> StageWorker::Step(int64_t clock, const Batch& batch,
                                             ParamBuffers* grads) {
  if (runner_ == nullptr) return absl::FailedPreconditionError("the pipeline is not linked yet");
  absl::StatusOr<StageClock> done = runner_->RunClock(clock, batch, job_.micro_batches(), grads);
  if (!done.ok()) Cancel(done.status());
  return done;
}

absl::StatusOr<StepResult> StageWorker::Evaluate(int64_t tag, const Batch& batch) {
  if (runner_ == nullptr) return absl::FailedPreconditionError("the pipeline is not linked yet");
  return runner_->Evaluate(tag, batch);
}

}  // namespace pstrain
