#include "common/stage_plan.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/params.h"

namespace pstrain {
namespace {

// Forward and backward: about three times the forward's multiply-adds x 2.
constexpr double kTrainFactor = 3.0;

std::vector<ModelUnit> MlpUnits(const ModelSpec& model) {
  std::vector<ModelUnit> units;
  int64_t width = model.input_dim();
  int param = 0;
  for (const LayerSpec& layer : model.layers()) {
    if (layer.type() != DENSE) continue;
    ModelUnit u;
    u.name = layer.name();
    u.first_param = param;
    u.end_param = param + 2;  // weight, bias
    u.flops_per_sample = kTrainFactor * 2.0 * static_cast<double>(width) * layer.units();
    units.push_back(u);
    param += 2;
    width = layer.units();
  }
  return units;
}

// Per block: qkv, proj, fc and mlp proj (24 C^2 multiply-adds per token)
// and attention's scores and weighted sum (2 T C each).
constexpr int kParamsPerBlock = 12;

std::vector<ModelUnit> GptUnits(const GptSpec& gpt) {
  const double c = gpt.width(), t = gpt.context();
  std::vector<ModelUnit> units;
  for (int b = 0; b < gpt.layers(); ++b) {
    ModelUnit u;
    u.name = absl::StrCat("h", b);
    u.first_param = 2 + b * kParamsPerBlock;  // after wte, wpe
    u.end_param = u.first_param + kParamsPerBlock;
    u.flops_per_sample = kTrainFactor * 2.0 * t * (12.0 * c * c + 2.0 * t * c);
    units.push_back(u);
  }
  // The embeddings go with the first block, lnf and the head with the last.
  units.front().first_param = 0;
  units.back().end_param += 3;
  units.back().flops_per_sample += kTrainFactor * 2.0 * t * c * kGptVocab;
  return units;
}

// The MLP layers [first, end) of the model spec that units [u0, u1) cover.
void MlpLayers(const ModelSpec& model, int u0, int u1, Stage* stage) {
  int unit = -1;
  stage->first_layer = model.layers_size();
  stage->end_layer = 0;
  for (int i = 0; i < model.layers_size(); ++i) {
    if (model.layers(i).type() == DENSE) ++unit;
    const int owner = std::max(unit, 0);  // layers before the first dense go with it
    if (owner >= u0 && owner < u1) {
      stage->first_layer = std::min(stage->first_layer, i);
      stage->end_layer = i + 1;
    }
  }
}

// An EXTERNAL model: one unit of every parameter (it is not cut into
// stages); its compute is the worker's business.
std::vector<ModelUnit> ExternalUnits(const ModelSpec& model) {
  ModelUnit u;
  u.name = "model";
  u.first_param = 0;
  u.end_param = model.params_size();
  return {u};
}

}  // namespace

std::vector<ModelUnit> ModelUnits(const ModelSpec& model) {
  if (model.kind() == EXTERNAL) return ExternalUnits(model);
  return model.kind() == GPT ? GptUnits(model.gpt()) : MlpUnits(model);
}

absl::StatusOr<std::vector<Stage>> PlanStages(const ModelSpec& model, int stages) {
  const std::vector<ModelUnit> units = ModelUnits(model);
  const int n = static_cast<int>(units.size());
  if (stages < 1 || stages > n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job spec: pipeline_stages (", stages, ") must be in [1, ", n, "]: the model has ", n,
        model.kind() == GPT ? " blocks" : " dense layers", " to cut between"));
  }
  std::vector<double> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + units[i].flops_per_sample;
  // best[k][i]: the least max-stage cost of units [0, i) in k stages;
  // cut[k][i] the start of the last of them.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= stages; ++k) {
    for (int i = k; i <= n; ++i) {
      for (int j = k - 1; j < i; ++j) {
        const double cost = std::max(best[k - 1][j], prefix[i] - prefix[j]);
        if (cost < best[k][i]) {
          best[k][i] = cost;
          cut[k][i] = j;
        }
      }
    }
  }
  std::vector<Stage> out(stages);
  for (int k = stages, end = n; k >= 1; end = cut[k][end], --k) {
    Stage& s = out[k - 1];
    s.first_unit = cut[k][end];
    s.end_unit = end;
    s.first_param = units[s.first_unit].first_param;
    s.end_param = units[end - 1].end_param;
    s.flops_per_sample = prefix[end] - prefix[s.first_unit];
    if (model.kind() == GPT) {
      s.first_layer = s.first_unit;
      s.end_layer = s.end_unit;
    } else {
      MlpLayers(model, s.first_unit, s.end_unit, &s);
    }
  }
  return out;
}

Stage WholeModel(const ModelSpec& model) {
  const absl::StatusOr<std::vector<Stage>> one = PlanStages(model, 1);
  return one.ok() ? one->front() : Stage();
}

std::string StageUnits(const std::vector<ModelUnit>& units, const Stage& stage) {
  const std::string& first = units[stage.first_unit].name;
  const std::string& last = units[stage.end_unit - 1].name;
  return first == last ? first : absl::StrCat(first, "-", last);
}

std::string DescribeStages(const ModelSpec& model, const std::vector<Stage>& stages) {
  const std::vector<ModelUnit> units = ModelUnits(model);
  double total = 0;
  for (const Stage& s : stages) total += s.flops_per_sample;
  std::string out;
  for (size_t i = 0; i < stages.size(); ++i) {
    const Stage& s = stages[i];
    absl::StrAppendFormat(&out, "%sstage %d: %s (%d params, %.3g MFLOP/sample, %.0f%%)",
                          i == 0 ? "" : "; ", i, StageUnits(units, s), s.end_param - s.first_param,
                          s.flops_per_sample / 1e6,
                          total > 0 ? 100.0 * s.flops_per_sample / total : 0.0);
  }
  return out;
}

}  // namespace pstrain
