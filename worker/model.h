// A model built from the job's model spec (dense, relu, softmax_xent layers)
// running on a kernels::Backend. Holds the worker's copy of the weights (as
// last pulled) and the gradients of the last step.
#ifndef PSTRAIN_WORKER_MODEL_H_
#define PSTRAIN_WORKER_MODEL_H_

#include <cstdint>
#include <vector>

#include "common/params.h"
#include "kernels/backend.h"
#include "proto/job.pb.h"

namespace pstrain {

struct StepResult {
  float loss = 0;  // mean over the batch
  int correct = 0;
};

// Not thread-safe.
class Model {
 public:
  // `model` must be a completed, valid spec; `backend` outlives the model.
  Model(const ModelSpec& model, kernels::Backend* backend);

  const std::vector<ParamInfo>& params() const { return params_; }
  // One buffer per parameter, in params() order.
  std::vector<std::vector<float>>& weights() { return weights_; }
  const std::vector<std::vector<float>>& grads() const { return grads_; }

  // Forward and backward on `rows` examples; grads() then holds the gradient
  // of the mean loss over them.
  StepResult TrainStep(const float* x, const int32_t* labels, int rows);
  // Forward only.
  StepResult Evaluate(const float* x, const int32_t* labels, int rows);

 private:
  StepResult Forward(const float* x, const int32_t* labels, int rows, bool backward);

  struct Layer {
    LayerType type;
    int in = 0, out = 0;  // widths
    int param = -1;       // DENSE: index of its weight (bias is param + 1)
  };

  kernels::Backend* backend_;
  std::vector<ParamInfo> params_;
  std::vector<Layer> layers_;
  std::vector<std::vector<float>> weights_;
  std::vector<std::vector<float>> grads_;
  std::vector<std::vector<float>> acts_;  // acts_[i]: input of layer i; last: logits
  std::vector<float> delta_, delta_prev_;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_MODEL_H_
