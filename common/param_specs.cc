#include "common/param_specs.h"

#include <algorithm>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_sizes.h"

namespace pstrain {
namespace {

std::string ShapeText(const ParamSpec& p) {
  return absl::StrCat("[", absl::StrJoin(p.shape(), ", "), "]");
}

// "parameter 3 of 6 (fc1.weight)"
std::string Which(int i, int n, const ParamSpec& p) {
  return absl::StrCat("parameter ", i + 1, " of ", n, " (", p.name(), ")");
}

}  // namespace

absl::Status ValidateParamSpecs(const ParamSpecs& params) {
  auto bad = [](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat("model parameters: ", parts...));
  };
  if (params.empty()) return bad("none declared (a model needs at least one trainable parameter)");
  if (params.size() > kMaxExternalParams) {
    return bad(params.size(), " declared; at most ", kMaxExternalParams, " are allowed");
  }
  absl::flat_hash_set<std::string> names;
  for (int i = 0; i < params.size(); ++i) {
    const ParamSpec& p = params[i];
    const std::string which = Which(i, params.size(), p);
    if (p.name().empty()) return bad("parameter ", i + 1, " has no name");
    if (p.name().size() > kMaxParamNameBytes) {
      return bad("parameter ", i + 1, "'s name is ", p.name().size(), " bytes; at most ",
                 kMaxParamNameBytes, " are allowed");
    }
    if (!names.insert(p.name()).second) return bad(which, ": the name is declared twice");
    // A buffer may be a scalar (BatchNorm's num_batches_tracked).
    if ((p.shape().empty() && p.buffer() == NOT_A_BUFFER) || p.shape_size() > kMaxParamRank) {
      return bad(which, ": ", p.shape_size(), " dimensions; 1 to ", kMaxParamRank,
                 " are allowed (a scalar is shape [1]; a buffer's may be [])");
    }
    int64_t numel = 1;
    for (int64_t d : p.shape()) {
      if (d < 1) return bad(which, ": shape ", ShapeText(p), " has a dimension < 1");
      numel = SaturatingMul(numel, d);
    }
    if (!BufferRule_IsValid(p.buffer())) return bad(which, ": unknown buffer rule ", p.buffer());
    if (numel > kMaxParamElements) {
      return bad(which, ": shape ", ShapeText(p), " has ", numel, " elements; at most ",
                 kMaxParamElements, " are allowed");
    }
    if (!DType_IsValid(p.dtype())) return bad(which, ": dtype ", p.dtype(), " is unknown");
  }
  return absl::OkStatus();
}

absl::Status MatchParamSpecs(const ParamSpecs& model, const ParamSpecs& offered) {
  auto differs = [](auto&&... parts) {
    return absl::FailedPreconditionError(
        absl::StrCat("this worker's model differs from the job's: ", parts...));
  };
  const int n = model.size();
  for (int i = 0; i < std::min(n, offered.size()); ++i) {
    const ParamSpec& want = model[i];
    const ParamSpec& got = offered[i];
    const std::string which = Which(i, n, want);
    if (got.name() != want.name()) {
      return differs(which, ": named ", got.name(), " here");
    }
    if (ShapeText(got) != ShapeText(want)) {
      return differs(which, ": shape ", ShapeText(got), " here, ", ShapeText(want),
                     " in the job's model");
    }
    if (got.buffer() != want.buffer()) {
      return differs(which, ": buffer rule ", BufferRule_Name(got.buffer()), " here, ",
                     BufferRule_Name(want.buffer()), " in the job's model");
    }
    if (got.dtype() != want.dtype()) {
      return differs(which, ": dtype ", DType_Name(got.dtype()), " here, ",
                     DType_Name(want.dtype()), " in the job's model");
    }
  }
  if (offered.size() < n) {
    return differs(offered.size(), " parameters here, ", n,
                   " in the job's model (the first missing: ", model[offered.size()].name(), ")");
  }
  if (offered.size() > n) {
    return differs(offered.size(), " parameters here, ", n,
                   " in the job's model (the first extra: ", offered[n].name(), ")");
  }
  return absl::OkStatus();
}

}  // namespace pstrain
