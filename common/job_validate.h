// Checking a completed job spec (after ApplyJobDefaults,
// common/job_defaults.h) for values no job can run with. The parts live
// beside it: the optimizer (common/job_optimizer.h), the model
// (common/job_validate_model.h), the tables (common/job_validate_tables.h)
// and the sizes (common/job_sizes.h).
#ifndef PSTRAIN_COMMON_JOB_VALIDATE_H_
#define PSTRAIN_COMMON_JOB_VALIDATE_H_

#include "absl/status/status.h"
#include "proto/job.pb.h"

namespace pstrain {

// Checks a completed spec for values no job can run with; INVALID_ARGUMENT
// naming the field otherwise ("job spec: num_workers must be in [1, 1024],
// got 0"). The first problem found is the one named, the job's own fields
// first, then the optimizer, the model, the standby copies, the tables and the
// sizes. Pure; thread-safe.
absl::Status ValidateJobSpec(const JobSpec& job);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_JOB_VALIDATE_H_
