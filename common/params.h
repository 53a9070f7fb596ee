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

// A GPT's vocabulary: the 256 byte values.
constexpr int kGptVocab = 256;

enum class Init { kZeros, kOnes, kGlorotUniform, kNormal };

struct ParamInfo {
  std::string name;            // "dense0/weight"
  std::vector<int64_t> shape;  // row-major
  int64_t numel = 0;
  Init init = Init::kZeros;
  int64_t fan_in = 0;
  int64_t fan_out = 0;
  float stddev = 0;  // kNormal
  // An EXTERNAL model's buffer (ParamSpec.buffer): values, not trained.
  BufferRule buffer = NOT_A_BUFFER;
};

// The parameters of a completed, valid model spec, in layer order. A GPT's:
// wte [256, C], wpe [context, C]; per block h<i>/ln1/{gamma,beta},
// h<i>/attn/qkv/{weight [C, 3C], bias}, h<i>/attn/proj/{weight [C, C], bias},
// h<i>/ln2/{gamma,beta}, h<i>/mlp/fc/{weight [C, 4C], bias},
// h<i>/mlp/proj/{weight [4C, C], bias}; lnf/{gamma,beta}; head/weight [C, 256].
std::vector<ParamInfo> ModelParams(const ModelSpec& model);

// Element `index` of parameter `param`'s initial value.
float InitialValue(uint64_t seed, const ParamInfo& param, int64_t index);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_PARAMS_H_
