// Reading a job spec (proto/job.proto) from its text format, and refusing
// the fields renamed since (issue 25) with their new names. Completing it
// is common/job_defaults.h, checking it common/job_validate.h.
#ifndef PSTRAIN_COMMON_JOB_PARSE_H_
#define PSTRAIN_COMMON_JOB_PARSE_H_

#include <string>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"

namespace pstrain {

// Parses a text-format JobSpec. Errors name the file, line and column:
// "job.pbtxt:3:7: Expected integer, got: foo"; a field renamed since is
// named with its new name: "job.pbtxt:5:1: field "steps" is now "clocks"".
// INVALID_ARGUMENT on any parse error. Thread-safe (no shared state).
absl::StatusOr<JobSpec> ParseJobSpecText(const std::string& text,
                                         const std::string& file_name);

// ParseJobSpecText of the file at `path`: NOT_FOUND when it cannot be
// opened, DATA_LOSS when it cannot be read.
absl::StatusOr<JobSpec> LoadJobSpec(const std::string& path);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_JOB_PARSE_H_
