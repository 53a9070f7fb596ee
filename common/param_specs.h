// A parameter list declared by workers (ModelSpec.params of an EXTERNAL
// model, common/external_model.h): its limits, its checks, and the check
// that two lists are the same model. Pure functions; thread-safe.
#ifndef PSTRAIN_COMMON_PARAM_SPECS_H_
#define PSTRAIN_COMMON_PARAM_SPECS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "proto/job.pb.h"

namespace pstrain {

using ParamSpecs = google::protobuf::RepeatedPtrField<ParamSpec>;

// Limits of a declared parameter list.
inline constexpr int kMaxExternalParams = 1 << 16;
inline constexpr int kMaxParamNameBytes = 256;
inline constexpr int kMaxParamRank = 8;
inline constexpr int64_t kMaxParamElements = int64_t{1} << 40;

// INVALID_ARGUMENT naming the first bad parameter: an empty, over-long or
// repeated name, no or too many dimensions, a dimension < 1, more than
// kMaxParamElements elements, an unknown
// dtype, more than kMaxExternalParams parameters, or none.
absl::Status ValidateParamSpecs(const ParamSpecs& params);

// OK when `offered` is `model`, parameter by parameter (name, shape, dtype,
// order); otherwise FAILED_PRECONDITION naming the first that differs, e.g.
// "parameter 3 of 6 (fc1.weight): shape [256, 784] here, [128, 784] in the
// job's model".
absl::Status MatchParamSpecs(const ParamSpecs& model, const ParamSpecs& offered);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_PARAM_SPECS_H_
