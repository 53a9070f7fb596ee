#include "worker/gradient_accumulator.h"

#include "common/status_macros.h"
#include "worker/data/dataset.h"

namespace pstrain {

void GradientAccumulator::Reset(const std::vector<ParamInfo>& params) {
  sum_.resize(params.size());
  for (size_t p = 0; p < params.size(); ++p) sum_[p].assign(params[p].numel, 0.0f);
}

void GradientAccumulator::Add(const ParamBuffers& grads, float share) {
  for (size_t p = 0; p < sum_.size(); ++p) {
    const std::vector<float>& g = grads[p];
    std::vector<float>& acc = sum_[p];
    for (size_t i = 0; i < g.size(); ++i) acc[i] += share * g[i];
  }
}

absl::StatusOr<StepResult> GradientAccumulator::Train(Model& model, const Batch& batch, int k) {
  Reset(model.params());
  StepResult total;
  double loss = 0;
  for (int m = 0; m < k; ++m) {
    const auto [begin, end] = EvenSlice(batch.rows, k, m);
    if (begin == end) continue;
    ASSIGN_OR_RETURN(const StepResult r, model.TrainStep(SliceBatch(batch, begin, end)));
    const float share = static_cast<float>(end - begin) / static_cast<float>(batch.rows);
    Add(model.grads(), share);
    loss += static_cast<double>(r.loss) * share;
    total.correct += r.correct;
    total.predicted += r.predicted;
  }
  total.loss = static_cast<float>(loss);
  return total;
}

}  // namespace pstrain
