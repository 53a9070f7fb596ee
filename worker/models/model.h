// The models a worker trains, built from the job's model spec and running on
// a kernels::Backend: an MLP (dense, relu, softmax_xent layers) and a GPT
// (worker/models/gpt_model.h). A model holds the worker's host copy of the weights
// (as last pulled) and of the gradients of the last step; the backend's
// device holds the working copies, activations and gradients.
#ifndef PSTRAIN_WORKER_MODELS_MODEL_H_
#define PSTRAIN_WORKER_MODELS_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/params.h"
#include "kernels/backend.h"
#include "kernels/device_array.h"
#include "proto/job.pb.h"
#include "worker/data/batch.h"

namespace pstrain {

struct StepResult {
  float loss = 0;         // mean over the predictions
  int64_t correct = 0;    // predictions whose arg-max is the label
  int64_t predicted = 0;  // predictions made: examples (MLP) or tokens (GPT)
};

// Not thread-safe. The host buffers of weights() and grads() are pinned
// for the device's copies (Backend::PinHost) while the model lives: they may
// be written, never resized. weights() may be swapped, whole, for buffers of
// the same shapes (WeightPrefetch::Take); the model unpins whatever buffers
// it holds when it goes, and pinning follows the buffers (the backend knows
// them by address), so the other party unpins the model's old ones.
class Model {
 public:
  virtual ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const std::vector<ParamInfo>& params() const { return params_; }
  // One host buffer per parameter, in params() order (a pull writes them);
  // each step uploads them to the device.
  std::vector<std::vector<float>>& weights() { return weights_; }
  const std::vector<std::vector<float>>& weights() const { return weights_; }
  const std::vector<std::vector<float>>& grads() const { return grads_; }
  std::vector<std::vector<float>>& mutable_grads() { return grads_; }
  // The loss's gradient is multiplied by this before the backward (dynamic
  // loss scaling); the gradients come out scaled by it. Default 1.
  void set_loss_scale(float scale) { loss_scale_ = scale; }
  // Called during TrainStep as soon as the gradients of `params` (indices
  // into params()) have reached grads(), last layer first; they stay
  // unchanged until the next step. Every parameter is reported once per
  // step. Unset: nothing is called.
  using GradsReady = std::function<void(const std::vector<int>& params)>;
  void set_grads_ready(GradsReady f) { grads_ready_ = std::move(f); }
  // Off: TrainStep neither uploads weights() nor fills grads(); it reuses the
  // weights on the device and leaves the gradients there, and returns once
  // the device is done (a benchmark of the device's compute alone). On by
  // default.
  void set_host_sync(bool on) { host_sync_ = on; }
  // Bytes of weights() and grads() the device pinned at construction (0 on
  // the CPU).
  int64_t pinned_bytes() const { return pinned_bytes_; }

  // Forward and backward; grads() then holds the gradient of the mean loss.
  // An error of the backend (a CUDA error, no device memory) becomes the
  // status.
  virtual absl::StatusOr<StepResult> TrainStep(const Batch& batch) = 0;
  // Forward only.
  virtual absl::StatusOr<StepResult> Evaluate(const Batch& batch) = 0;

 protected:
  Model(const ModelSpec& spec, kernels::Backend* backend);
  // The backend's first error as a status.
  absl::Status BackendStatus() const;
  // Uploads the weights of `params`, queued before the work that uses them
  // (the device copies them while it computes what was queued before).
  void UploadWeights(const std::vector<int>& params);
  // Queues the download of the gradients of `params` once the work queued
  // so far has made them; with GradsReady set, it reports them once they
  // have landed (at the latest in FinishGrads).
  void Ready(const std::vector<int>& params);
  // Waits for every gradient download queued by Ready (or, when nothing was
  // reported, downloads them all) and reports what is left to report.
  void FinishGrads();
  // Reports the queued downloads that have landed, oldest first, up to the
  // first still under way (or, with `wait`, all of them).
  void ReportLanded(bool wait);

  kernels::Backend* backend_;
  std::vector<ParamInfo> params_;
  std::vector<std::vector<float>> weights_, grads_;  // host
  std::vector<kernels::DeviceArray<float>> device_weights_, device_grads_;
  float loss_scale_ = 1.0f;
  bool host_sync_ = true;
  int64_t pinned_bytes_ = 0;
  GradsReady grads_ready_;
  // Downloads queued by Ready, with the fence after them, oldest first.
  std::vector<std::pair<int64_t, std::vector<int>>> pending_grads_;
};

// A completed, valid spec's model; `backend` outlives it. `recompute`: a
// GPT recomputes each block's activations in the backward instead of keeping
// them (the MLP keeps its few).
std::unique_ptr<Model> MakeModel(const ModelSpec& spec, kernels::Backend* backend,
                                 bool recompute = false);

// Rows [begin, end) of `batch`.
Batch SliceBatch(const Batch& batch, int begin, int end);

class MlpModel : public Model {
 public:
  MlpModel(const ModelSpec& spec, kernels::Backend* backend);
  absl::StatusOr<StepResult> TrainStep(const Batch& batch) override {
    return Run(batch, /*backward=*/true);
  }
  absl::StatusOr<StepResult> Evaluate(const Batch& batch) override {
    return Run(batch, /*backward=*/false);
  }

 private:
  absl::StatusOr<StepResult> Run(const Batch& batch, bool backward);

  struct Layer {
    LayerType type;
    int in = 0, out = 0;  // widths
    int param = -1;       // DENSE: index of its weight (bias is param + 1)
  };
  using Array = kernels::DeviceArray<float>;

  std::vector<Layer> layers_;
  std::vector<Array> acts_;  // acts_[i]: output of layer i (the input is `input_`)
  Array input_, delta_, delta_prev_;
  kernels::DeviceArray<int32_t> labels_;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_MODELS_MODEL_H_
