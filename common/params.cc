#include "common/params.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

}  // namespace

std::vector<ParamInfo> ModelParams(const ModelSpec& model) {
  std::vector<ParamInfo> params;
  int64_t width = model.input_dim();
  for (const LayerSpec& layer : model.layers()) {
    if (layer.type() != DENSE) continue;
    const int64_t units = layer.units();
    ParamInfo w;
    w.name = absl::StrCat(layer.name(), "/weight");
    w.shape = {width, units};
    w.numel = width * units;
    w.init = Init::kGlorotUniform;
    w.fan_in = width;
    w.fan_out = units;
    ParamInfo b;
    b.name = absl::StrCat(layer.name(), "/bias");
    b.shape = {units};
    b.numel = units;
    b.init = Init::kZeros;
    params.push_back(std::move(w));
    params.push_back(std::move(b));
    width = units;
  }
  return params;
}

float InitialValue(uint64_t seed, const ParamInfo& param, int64_t index) {
  switch (param.init) {
    case Init::kZeros:
      return 0.0f;
    case Init::kGlorotUniform: {
      const uint64_t bits =
          SplitMix64(SplitMix64(seed ^ Fnv1a(param.name)) + static_cast<uint64_t>(index));
      const double u = static_cast<double>(bits >> 11) * 0x1.0p-53;  // [0, 1)
      const double limit = std::sqrt(6.0 / static_cast<double>(param.fan_in + param.fan_out));
      return static_cast<float>((2.0 * u - 1.0) * limit);
    }
  }
  return 0.0f;
}

}  // namespace pstrain
