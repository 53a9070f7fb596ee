// An OptimizerSpec's defaults and checks, one rule for the job's optimizer
// (JobSpec.optimizer) and for each sparse table's (TableSpec.optimizer; the
// tables' own limits are common/job_validate_tables.h). Pure functions of
// their arguments; thread-safe.
#ifndef PSTRAIN_COMMON_JOB_OPTIMIZER_H_
#define PSTRAIN_COMMON_JOB_OPTIMIZER_H_

#include "absl/status/status.h"
#include "proto/job.pb.h"

namespace pstrain {

// Fills every unset field of `opt` with its documented default
// (proto/job.proto): ADAM, the type's learning rate and epsilon, ...
void ApplyOptimizerDefaults(OptimizerSpec* opt);

// Checks a completed OptimizerSpec: INVALID_ARGUMENT "job spec: optimizer.
// <field> ..." naming the first bad field.
absl::Status ValidateOptimizer(const OptimizerSpec& opt);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_JOB_OPTIMIZER_H_
