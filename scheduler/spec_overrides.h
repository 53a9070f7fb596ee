// Overrides of the job spec from ps_scheduler's command line. One table,
// SpecOverrideFlags(), lists every flag that replaces a spec field -- its
// name, the field, the values allowed -- and drives the collecting of the
// flags (scheduler_main.cc), their checking and their application alike:
// a field added to the table is overridable, checked and applied with no
// other line to write (its ABSL_FLAG in scheduler_main.cc aside).
#ifndef PSTRAIN_SCHEDULER_SPEC_OVERRIDES_H_
#define PSTRAIN_SCHEDULER_SPEC_OVERRIDES_H_

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/job.pb.h"

namespace pstrain {

// The overrides given: flag name -> the flag's value as text ("3", "ssp",
// "/data"). A flag given (with any value, its default's included) replaces
// its field; a flag not given keeps the spec's.
using SpecOverrides = std::map<std::string, std::string>;

// One overridable field of JobSpec.
struct SpecOverrideFlag {
  const char* flag;   // ps_scheduler's --flag
  const char* field;  // the field's path in JobSpec: "staleness", "data.path"
  // Integer fields: the values allowed. String fields are directories (not
  // empty); enum fields take their words (common/enum_names.h), any case.
  int64_t min = 0;
  int64_t max = std::numeric_limits<int64_t>::max();
};

// Every overridable field, in the order they are checked (the first bad
// one is reported).
const std::vector<SpecOverrideFlag>& SpecOverrideFlags();

// The flags' allowed values: INVALID_ARGUMENT naming the first flag out of
// its range or not a flag of the table (the spec's own checks follow in
// ValidateJobSpec).
absl::Status CheckOverrides(const SpecOverrides& overrides);

// Checks, then sets the overridden fields of *job; INVALID_ARGUMENT for a
// bad value (*job untouched then).
absl::Status ApplyOverrides(const SpecOverrides& overrides, JobSpec* job);

}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_SPEC_OVERRIDES_H_
