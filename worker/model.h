// A model built from the job's model spec (dense, relu, softmax_xent layers)
// running on a kernels::Backend. Holds the worker's host copy of the weights
// (as last pulled) and of the gradients of the last step; the backend's
// device holds the working copies, activations and gradients.
#ifndef PSTRAIN_WORKER_MODEL_H_
#define PSTRAIN_WORKER_MODEL_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/params.h"
#include "kernels/backend.h"
#include "kernels/device_array.h"
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
  // One host buffer per parameter, in params() order (a pull writes them);
  // each step uploads them to the device.
  std::vector<std::vector<float>>& weights() { return weights_; }
  const std::vector<std::vector<float>>& weights() const { return weights_; }
  const std::vector<std::vector<float>>& grads() const { return grads_; }

  // Forward and backward on `rows` examples (host memory); grads() then holds
  // the gradient of the mean loss over them. An error of the backend (a CUDA
  // error, no device memory) becomes the status.
  absl::StatusOr<StepResult> TrainStep(const float* x, const int32_t* labels, int rows);
  // Forward only.
  absl::StatusOr<StepResult> Evaluate(const float* x, const int32_t* labels, int rows);

 private:
  absl::StatusOr<StepResult> Run(const float* x, const int32_t* labels, int rows, bool backward);
  absl::Status BackendStatus() const;

  struct Layer {
    LayerType type;
    int in = 0, out = 0;  // widths
    int param = -1;       // DENSE: index of its weight (bias is param + 1)
  };
  using Array = kernels::DeviceArray<float>;

  kernels::Backend* backend_;
  std::vector<ParamInfo> params_;
  std::vector<Layer> layers_;
  std::vector<std::vector<float>> weights_, grads_;  // host
  std::vector<Array> device_weights_, device_grads_;
  std::vector<Array> acts_;  // acts_[i]: output of layer i (the input is `input_`)
  Array input_, delta_, delta_prev_;
  kernels::DeviceArray<int32_t> labels_;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_MODEL_H_
