#include "common/external_model.h"

#include "absl/strings/str_cat.h"
#include "common/job_validate.h"

namespace pstrain {

namespace {

absl::Status NotExternal(const JobSpec& job) {
  return absl::FailedPreconditionError(absl::StrCat(
      "this job trains the built-in model ", ModelKind_Name(job.model().kind()),
      "; a worker that brings its own model needs a job with model { kind: EXTERNAL }"));
}

}  // namespace

absl::StatusOr<JobSpec> ExternalJobToJoin(JobSpec job) {
  if (job.model().kind() != EXTERNAL) return NotExternal(job);
  return job;
}

absl::StatusOr<JobSpec> JoinExternalModel(JobSpec job, const ParamSpecs& params,
                                          int64_t train_size) {
  if (job.model().kind() != EXTERNAL) {
    if (params.empty()) return job;
    return NotExternal(job);
  }
  if (params.empty()) {
    return absl::FailedPreconditionError(
        "this job's model is EXTERNAL (the workers' own, e.g. a PyTorch script through "
        "pstrain.torch): a worker must declare its parameters; ps_worker trains only the "
        "built-in models");
  }
  if (job.model().params().empty()) {
    if (const absl::Status st = ValidateParamSpecs(params); !st.ok()) return st;
    *job.mutable_model()->mutable_params() = params;
  } else if (const absl::Status st = MatchParamSpecs(job.model().params(), params); !st.ok()) {
    return st;
  }
  if (train_size < 0) {
    return absl::InvalidArgumentError(absl::StrCat("train_size ", train_size, " is negative"));
  }
  if (job.data().train_size() == 0) {
    job.mutable_data()->set_train_size(train_size);
  } else if (train_size != 0 && train_size != job.data().train_size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("this worker's training set has ", train_size, " examples, the job's ",
                     job.data().train_size()));
  }
  if (const absl::Status st = ValidateJobSpec(job); !st.ok()) return st;
  return job;
}

JobSpec WithDeclaredModel(JobSpec job, const JobSpec& joined) {
  if (job.model().kind() != EXTERNAL || joined.model().kind() != EXTERNAL) return job;
  if (job.model().params().empty()) {
    *job.mutable_model()->mutable_params() = joined.model().params();
  }
  if (job.data().train_size() == 0) job.mutable_data()->set_train_size(joined.data().train_size());
  return job;
}

}  // namespace pstrain
