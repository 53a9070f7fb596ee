// An OptimizerSpec's defaults and checks, one rule for the job's optimizer
// (JobSpec.optimizer) and for each sparse table's (TableSpec.optimizer; the
// tables' own limits are common/job_validate_tables.h). Pure functions of
// their arguments; thread-safe.
#ifndef PSTRAIN_COMMON_JOB_OPTIMIZER_H_
#define PSTRAIN_COMMON_JOB_OPTIMIZER_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/job.pb.h"

namespace pstrain {

// Fills every unset field of `opt` with its documented default
// (proto/job.proto): ADAM, the type's learning rate and epsilon, ...
void ApplyOptimizerDefaults(OptimizerSpec* opt);

// Checks a completed OptimizerSpec: INVALID_ARGUMENT "job spec: optimizer.
// <field> ..." naming the first bad field.
absl::Status ValidateOptimizer(const OptimizerSpec& opt);

// The job's optimizer `job` with the fields `hyper` sets replaced (proto3
// presence: an optional field set, a submessage present): a script's
// hyperparameters for a clock (PushRequest.hyper). INVALID_ARGUMENT naming
// the field when `hyper` names another optimizer type, sets what a script
// may not (schedule, clip_norm, allow_nonfinite), or makes the optimizer
// invalid (ValidateOptimizer's message).
absl::StatusOr<OptimizerSpec> WithHyper(const OptimizerSpec& job, const OptimizerSpec& hyper);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_JOB_OPTIMIZER_H_
