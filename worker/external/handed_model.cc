#include "worker/external/handed_model.h"

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/status_macros.h"

namespace pstrain {

BatchSampler ExternalDataOrder(const JobSpec& job) {
  return BatchSampler(job.seed(), TrainSetSize(job), job.batch_size(), ClocksPerEpoch(job));
}

absl::StatusOr<StepResult> HandedModel::Forward(int, const Batch&, const std::vector<float>*,
                                                std::vector<float>*, bool train) {
  if (!train) return absl::UnimplementedError("the caller evaluates its model itself");
  // The weights of clock 0, pushed again after a rollback to it: whole.
  const bool keeps_initial = data_->offer().clock == 0 && initial_->empty();
  if (!by_layer_ || keeps_initial) RETURN_IF_ERROR(Model::AwaitAllWeights());
  if (keeps_initial) *initial_ = weights();
  mutable_grads_absent().assign(params().size(), false);
  mutable_grads_at().assign(params().size(), nullptr);
  {
    absl::MutexLock lock(&mu_);
    in_clock_ = true;
    clock_await_ = weights_await_;
    read_ = absl::OkStatus();
  }
  // A gradient leaves once every weight is in (a later layer's pull that
  // fails loses the clock, as ps_worker's step waits for all before a
  // push); by then the forward has read nearly all of them.
  std::vector<int> all(params().size());
  for (size_t p = 0; p < all.size(); ++p) all[p] = static_cast<int>(p);
  std::vector<bool> sent(params().size(), false);
  auto ready = [&](const std::vector<int>& params, const std::vector<bool>& absent,
                   const std::vector<const float*>& at) {
    for (size_t i = 0; i < params.size(); ++i) {
      sent[params[i]] = true;
      mutable_grads_absent()[params[i]] = absent[i];
      mutable_grads_at()[params[i]] = at[i];
    }
    if (AwaitRead(all).ok()) ReportGrads(params);
  };
  absl::StatusOr<StepResult> result = exchange_->RunClock(data_->offer(), ready);
  std::vector<int> rest;
  for (size_t p = 0; p < sent.size(); ++p) {
    if (!sent[p]) rest.push_back(static_cast<int>(p));
  }
  if (result.ok() && !rest.empty() && AwaitRead(all).ok()) ReportGrads(rest);
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* awaiting) { return *awaiting == 0; }, &awaiting_));
  clock_await_ = nullptr;
  in_clock_ = false;
  if (!read_.ok()) return read_;
  return result;
}

absl::Status HandedModel::AwaitWeightsOf(int param) {
  if (param < 0 || param >= static_cast<int>(params().size())) {
    return absl::InvalidArgumentError(absl::StrCat("no parameter ", param));
  }
  return AwaitRead({param});
}

absl::Status HandedModel::AwaitRead(const std::vector<int>& params) {
  WeightsAwait await;
  {
    absl::MutexLock lock(&mu_);
    if (!in_clock_) return absl::FailedPreconditionError("no clock under way");
    if (!clock_await_ || !read_.ok() || params.empty()) return read_;
    await = clock_await_;
    ++awaiting_;
  }
  const absl::Status st = await(params);
  absl::MutexLock lock(&mu_);
  --awaiting_;
  read_.Update(st);
  return read_;
}

}  // namespace pstrain
