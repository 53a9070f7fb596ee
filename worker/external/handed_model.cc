#include "worker/external/handed_model.h"

#include <algorithm>

#include "common/job_spec.h"
#include "common/status_macros.h"

namespace pstrain {

BatchSampler ExternalDataOrder(const JobSpec& job) {
  return BatchSampler(job.seed(), TrainSetSize(job), job.batch_size(), ClocksPerEpoch(job));
}

absl::StatusOr<StepResult> HandedModel::Forward(int, const Batch&, const std::vector<float>*,
                                                std::vector<float>*, bool train) {
  if (!train) return absl::UnimplementedError("the caller evaluates its model itself");
  // The script reads every weight when its clock starts: all must be in.
  RETURN_IF_ERROR(AwaitAllWeights());
  // The weights of clock 0, pushed again after a rollback to it.
  if (data_->offer().clock == 0 && initial_->empty()) *initial_ = weights();
  for (std::vector<float>& g : mutable_grads()) std::fill(g.begin(), g.end(), 0.0f);
  mutable_grads_absent().assign(params().size(), false);
  std::vector<bool> sent(params().size(), false);
  auto ready = [this, &sent](const std::vector<int>& params, const std::vector<bool>& absent) {
    for (size_t i = 0; i < params.size(); ++i) {
      sent[params[i]] = true;
      mutable_grads_absent()[params[i]] = absent[i];
    }
    ReportGrads(params);
  };
  ASSIGN_OR_RETURN(const StepResult result, exchange_->RunClock(data_->offer(), ready));
  std::vector<int> rest;
  for (size_t p = 0; p < sent.size(); ++p) {
    if (!sent[p]) rest.push_back(static_cast<int>(p));
  }
  if (!rest.empty()) ReportGrads(rest);
  return result;
}

}  // namespace pstrain
