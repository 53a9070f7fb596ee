#include "common/params.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/hash.h"

namespace pstrain {
namespace {

ParamInfo Param(const std::string& name, std::vector<int64_t> shape, Init init,
                float stddev = 0) {
  ParamInfo p;
  p.name = name;
  p.shape = std::move(shape);
  p.numel = 1;
  for (int64_t d : p.shape) p.numel *= d;
  p.init = init;
  p.stddev = stddev;
  return p;
}

// GPT-2's initialisation: N(0, 0.02), the projections into the residual
// stream scaled down by sqrt(2 * layers); layernorm gains 1, biases 0.
std::vector<ParamInfo> GptParams(const GptSpec& gpt) {
  const int64_t c = gpt.width();
  const float std = 0.02f;
  const float residual_std = std / std::sqrt(2.0f * gpt.layers());
  std::vector<ParamInfo> params;
  params.push_back(Param("wte", {kGptVocab, c}, Init::kNormal, std));
  params.push_back(Param("wpe", {gpt.context(), c}, Init::kNormal, std));
  for (int i = 0; i < gpt.layers(); ++i) {
    const std::string h = absl::StrCat("h", i, "/");
    params.push_back(Param(h + "ln1/gamma", {c}, Init::kOnes));
    params.push_back(Param(h + "ln1/beta", {c}, Init::kZeros));
    params.push_back(Param(h + "attn/qkv/weight", {c, 3 * c}, Init::kNormal, std));
    params.push_back(Param(h + "attn/qkv/bias", {3 * c}, Init::kZeros));
    params.push_back(Param(h + "attn/proj/weight", {c, c}, Init::kNormal, residual_std));
    params.push_back(Param(h + "attn/proj/bias", {c}, Init::kZeros));
    params.push_back(Param(h + "ln2/gamma", {c}, Init::kOnes));
    params.push_back(Param(h + "ln2/beta", {c}, Init::kZeros));
    params.push_back(Param(h + "mlp/fc/weight", {c, 4 * c}, Init::kNormal, std));
    params.push_back(Param(h + "mlp/fc/bias", {4 * c}, Init::kZeros));
    params.push_back(Param(h + "mlp/proj/weight", {4 * c, c}, Init::kNormal, residual_std));
    params.push_back(Param(h + "mlp/proj/bias", {c}, Init::kZeros));
  }
  params.push_back(Param("lnf/gamma", {c}, Init::kOnes));
  params.push_back(Param("lnf/beta", {c}, Init::kZeros));
  params.push_back(Param("head/weight", {c, kGptVocab}, Init::kNormal, std));
  return params;
}

// An EXTERNAL model's declared parameters. Their initial values are the
// workers' own (worker 0's push them to the servers), not a function of
// the spec: kZeros stands until then.
std::vector<ParamInfo> ExternalParams(const ModelSpec& model) {
  std::vector<ParamInfo> params;
  params.reserve(model.params_size());
  for (const ParamSpec& spec : model.params()) {
    ParamInfo p;
    p.name = spec.name();
    p.shape.assign(spec.shape().begin(), spec.shape().end());
    p.numel = 1;
    for (int64_t d : p.shape) p.numel *= d;
    p.init = Init::kZeros;
    p.buffer = spec.buffer();
    params.push_back(std::move(p));
  }
  return params;
}

}  // namespace

std::vector<ParamInfo> ModelParams(const ModelSpec& model) {
  if (model.kind() == GPT) return GptParams(model.gpt());
  if (model.kind() == EXTERNAL) return ExternalParams(model);
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
    case Init::kOnes:
      return 1.0f;
    case Init::kNormal: {
      // Box-Muller on two hashed uniforms in (0, 1).
      const uint64_t base = SplitMix64(seed ^ Fnv1a(param.name)) + 2 * static_cast<uint64_t>(index);
      const double u1 = (static_cast<double>(SplitMix64(base) >> 11) + 0.5) * 0x1.0p-53;
      const double u2 = (static_cast<double>(SplitMix64(base + 1) >> 11) + 0.5) * 0x1.0p-53;
      return static_cast<float>(param.stddev * std::sqrt(-2.0 * std::log(u1)) *
                                std::cos(2.0 * M_PI * u2));
    }
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
