// The sparse tables' half of ValidateJobSpec (JobSpec.tables and
// table_consistency): names, widths, admission and expiry, and optimizers
// that have a row-wise form. Their memory limits are ValidateJobSizes'
// (common/job_sizes.h). Pure functions; thread-safe.
#ifndef PSTRAIN_COMMON_JOB_VALIDATE_TABLES_H_
#define PSTRAIN_COMMON_JOB_VALIDATE_TABLES_H_

#include "absl/status/status.h"
#include "proto/job.pb.h"

namespace pstrain {

// Checks a completed spec's tables: INVALID_ARGUMENT "job spec: table
// 'NAME': ..." naming the first bad field (or "job spec: table_consistency
// ..." for the tables' mode).
absl::Status ValidateTables(const JobSpec& job);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_JOB_VALIDATE_TABLES_H_
