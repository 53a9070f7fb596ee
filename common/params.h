// The model's parameters as every party derives them from the job spec, and
// their initial values: a function of (seed, parameter name, element index)
// only, so they do not depend on the number of servers.
#ifndef PSTRAIN_COMMON_PARAMS_H_
#define PSTRAIN_COMMON_PARAMS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "proto/job.pb.h"

namespace pstrain {

enum class Init { kZeros, kGlorotUniform };

struct ParamInfo {
  std::string name;            // "dense0/weight"
  std::vector<int64_t> shape;  // row-major
  int64_t numel = 0;
  Init init = Init::kZeros;
  int64_t fan_in = 0;
  int64_t fan_out = 0;
};

// The parameters of a completed, valid model spec, in layer order.
std::vector<ParamInfo> ModelParams(const ModelSpec& model);

// Element `index` of parameter `param`'s initial value.
float InitialValue(uint64_t seed, const ParamInfo& param, int64_t index);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_PARAMS_H_
