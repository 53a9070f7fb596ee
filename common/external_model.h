// An EXTERNAL model (job.proto): the workers' own, a PyTorch script's
// through pstrain.torch. Its parameters are not derived from the spec but
// declared by the workers when they register: the first worker's list
// becomes the job's model (unless the job file fixed one), and every other
// worker must declare the same list. These are the checks, with no I/O
// (a list's own checks are common/param_specs.h); the scheduler's
// coordinator applies them at registration.
#ifndef PSTRAIN_COMMON_EXTERNAL_MODEL_H_
#define PSTRAIN_COMMON_EXTERNAL_MODEL_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "common/param_specs.h"
#include "proto/job.pb.h"

namespace pstrain {

// The job once a worker declaring `params` and a training set of
// `train_size` examples (0: not said) joined it. An EXTERNAL model without
// parameters takes `params` (validated, and the job validated again with
// them: sizes, chunk counts); one with parameters must match them. A job
// without data.train_size takes the worker's; one with it refuses another
// (FAILED_PRECONDITION). A job of another model kind refuses a worker that
// declares parameters, and an EXTERNAL one a worker that declares none
// (FAILED_PRECONDITION: a built-in model's worker, ps_worker).
absl::StatusOr<JobSpec> JoinExternalModel(JobSpec job, const ParamSpecs& params,
                                          int64_t train_size);

// The job for a worker that joins now and declares its model later
// (RegisterRequest.declare_later): `job` itself when its model is
// EXTERNAL, else FAILED_PRECONDITION as JoinExternalModel's.
absl::StatusOr<JobSpec> ExternalJobToJoin(JobSpec job);

// `job` with what workers declared in `joined` (the same job, as the
// scheduler kept it): the model's parameters and the training set's size,
// where `job` leaves them out. A restarted scheduler compares its --job
// with the job of its state file through this.
JobSpec WithDeclaredModel(JobSpec job, const JobSpec& joined);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_EXTERNAL_MODEL_H_
