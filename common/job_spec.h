// The job spec (proto/job.proto), all of it: this header gathers the parts
// so that a caller that reads, completes, checks and runs a job includes
// one. Each part has its own header, to include alone where one is enough:
//
//   common/job_parse.h        ParseJobSpecText, LoadJobSpec (and the
//                             renamed fields' refusals)
//   common/job_defaults.h     ApplyJobDefaults
//   common/job_validate.h     ValidateJobSpec (its parts: job_optimizer.h,
//                             job_validate_model.h, job_validate_tables.h)
//   common/job_sizes.h        TrainSetSize, ClocksPerEpoch, TotalClocks, and
//                             the size limits
//   common/job_consistency.h  EffectiveStaleness, MinClockForRead,
//                             TableConsistency, ConsistencySchedule
//
// A spec is used as ParseJobSpecText/LoadJobSpec -> (flags) ->
// ApplyJobDefaults -> ValidateJobSpec; the rest read a completed spec.
#ifndef PSTRAIN_COMMON_JOB_SPEC_H_
#define PSTRAIN_COMMON_JOB_SPEC_H_

#include "common/job_consistency.h"
#include "common/job_defaults.h"
#include "common/job_parse.h"
#include "common/job_sizes.h"
#include "common/job_validate.h"

#endif  // PSTRAIN_COMMON_JOB_SPEC_H_
