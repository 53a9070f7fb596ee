// Completing a job spec: every field the spec leaves unset gets its
// documented default (proto/job.proto, docs/job-spec.md). Reading the spec
// is common/job_parse.h, checking it common/job_validate.h.
#ifndef PSTRAIN_COMMON_JOB_DEFAULTS_H_
#define PSTRAIN_COMMON_JOB_DEFAULTS_H_

#include "proto/job.pb.h"

namespace pstrain {

// Fills every unset field with its documented default (proto/job.proto):
// the data set and the model kind from each other, the quick start's MLP
// when no model is given, layer names (dense0, relu1, ...), the optimizers'
// (common/job_optimizer.h), BSP, and the sizes. A field written in the
// spec, zero included, is kept. Idempotent; touches nothing but *job.
void ApplyJobDefaults(JobSpec* job);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_JOB_DEFAULTS_H_
