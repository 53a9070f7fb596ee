// The models a worker trains, built from the job's model spec and running on
// a kernels::Backend: an MLP (dense, relu, softmax_xent layers) and a GPT
// (worker/models/gpt_model.h). A model holds the worker's host copy of the
// weights (as last pulled) and of the gradients of the last step; the
// backend's device holds the working copies, activations and gradients.
//
// A model is one pipeline stage of the model spec (common/stage_plan.h): the
// whole model, or the layers of one stage. A stage's params() are its slice
// of ModelParams() (its first is stage().first_param there); a stage that is
// not the first takes the activations of the one before as input, and one
// that is not the last hands its output activations on and takes their
// gradient back. Each micro-batch in flight keeps its activations in a stash
// of its own, from its Forward to its Backward.
//
// Windowed (ps_worker --device_memory_budget, GPT models): no parameter
// lives on the device for good. A unit's (a block's, the embeddings', the
// head's) weights are uploaded when the pass reaches the unit before it
// (so the copy runs while that one computes) and freed after their use;
// its gradients are allocated for its backward, downloaded as soon as they
// are made, and freed.
#ifndef PSTRAIN_WORKER_MODELS_MODEL_H_
#define PSTRAIN_WORKER_MODELS_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/params.h"
#include "common/stage_plan.h"
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
  // A model that keeps two host sets of weights (KeepTwoWeightSets): makes
  // the other set the current one -- weights() -- so that a pull writes a
  // clock's weights there while the caller still reads the clock before's
  // from the set it had (a PyTorch worker's CPU parameters are views of
  // the library's buffers: pstrain.torch). The set made current holds
  // older weights until it is written whole, so every writer of weights()
  // (a pull, a prefetch's take, the final read) flips first, and a clock
  // that reads no new weights (the cache's) does not. Each set's buffers
  // keep their addresses. No-op with one set.
  void FlipWeights() {
    if (two_weight_sets_) std::swap(weights_, spare_weights_);
  }
  // The last step's gradients, one host buffer per parameter. There are two
  // sets; FlipGrads makes the other one the next step's, so pushes of one
  // step may still read theirs while the next step writes.
  const std::vector<std::vector<float>>& grads() const { return grad_sets_[grad_set_]; }
  std::vector<std::vector<float>>& mutable_grads() { return grad_sets_[grad_set_]; }
  void FlipGrads() { grad_set_ ^= 1; }
  // Per parameter, whether the last step produced no gradient for it: a
  // model the caller computes (worker/external) may leave a parameter
  // without one (a PyTorch parameter frozen mid-run), and its push then
  // says so (ParamClient::Push's `absent`). Empty: every one has one (a
  // built-in model's always do).
  const std::vector<bool>& grads_absent() const { return grads_absent_; }
  std::vector<bool>& mutable_grads_absent() { return grads_absent_; }
  // Per parameter, where the last step's gradient lies when not in
  // grads(): the caller's memory (worker/external: a PyTorch gradient
  // handed over without a copy, pst_grads_at); null: in grads(). Empty:
  // every one is in grads().
  const std::vector<const float*>& grads_at() const { return grads_at_; }
  std::vector<const float*>& mutable_grads_at() { return grads_at_; }
  // The loss's gradient is multiplied by this before the backward (dynamic
  // loss scaling); the gradients come out scaled by it. Default 1.
  void set_loss_scale(float scale) { loss_scale_ = scale; }
  // Called during TrainStep as soon as the gradients of `params` (indices
  // into params()) have reached grads(), last layer first; they stay
  // unchanged until the next step. Every parameter is reported once per
  // step. Unset: nothing is called.
  using GradsReady = std::function<void(const std::vector<int>& params)>;
  void set_grads_ready(GradsReady f) { grads_ready_ = std::move(f); }
  // Called before the weights of `params` are read from weights() (for the
  // device: uploaded), layer by layer in the forward's order; it returns
  // once they are there (a pull still landing: worker/weight_arrivals.h),
  // or the pull's error, which TrainStep then returns before its backward.
  // Unset: weights() are complete whenever a step begins.
  using WeightsAwait = std::function<absl::Status(const std::vector<int>& params)>;
  void set_weights_await(WeightsAwait f) { weights_await_ = std::move(f); }
  // Off: TrainStep neither uploads weights() nor fills grads(); it reuses the
  // weights on the device and leaves the gradients there, and returns once
  // the device is done (a benchmark of the device's compute alone). On by
  // default.
  void set_host_sync(bool on) { host_sync_ = on; }
  // Bytes of weights() and grads() the device pinned at construction (0 on
  // the CPU).
  int64_t pinned_bytes() const { return pinned_bytes_; }

  // The whole model: forward and backward; grads() then holds the gradient
  // of the mean loss. An error of the backend (a CUDA error, no device
  // memory) becomes the status.
  absl::StatusOr<StepResult> TrainStep(const Batch& batch);
  // The whole model: forward only.
  absl::StatusOr<StepResult> Evaluate(const Batch& batch);

  // This model's part of the model spec.
  const Stage& stage() const { return stage_; }
  bool first_stage() const { return first_; }
  bool last_stage() const { return last_; }
  // Floats per row (example or sequence) entering this stage from the stage
  // before (not the first) and leaving it for the next (not the last).
  int64_t input_width() const { return input_width_; }
  int64_t output_width() const { return output_width_; }

  // The forward of `batch`'s rows through this stage's layers, kept in
  // `stash` for its backward (with `train`). The first stage reads the batch's
  // x or tokens, a later one `input` (rows x input_width() floats). The last
  // stage returns the loss against the batch's labels; an earlier one writes
  // its output (rows x output_width()) to *output and returns no loss.
  // INVALID_ARGUMENT for an input of the wrong size.
  virtual absl::StatusOr<StepResult> Forward(int stash, const Batch& batch,
                                             const std::vector<float>* input,
                                             std::vector<float>* output, bool train) = 0;
  // The backward of the micro-batch in `stash`: the last stage starts from
  // its loss, an earlier one from `grad_output` (the gradient of its
  // output); grads() then holds this micro-batch's parameter gradients, and
  // a stage that is not the first writes the gradient of its input to
  // *grad_input.
  virtual absl::Status Backward(int stash, const std::vector<float>* grad_output,
                                std::vector<float>* grad_input) = 0;

 protected:
  // `windowed`: see the class comment.
  Model(const ModelSpec& spec, const Stage& stage, kernels::Backend* backend,
        bool windowed = false);
  // A second host set of weights from now on (FlipWeights), pinned as the
  // first; a subclass's constructor's.
  void KeepTwoWeightSets();
  // INVALID_ARGUMENT unless `v` holds rows x width floats.
  static absl::Status CheckSize(const std::vector<float>* v, int64_t rows, int64_t width,
                                const char* what);
  // The backend's first error as a status.
  absl::Status BackendStatus() const;
  // Waits for the weights of `params` (all of them) through WeightsAwait,
  // if set; its error, also kept for TrainStep to return.
  absl::Status AwaitWeights(const std::vector<int>& params);
  absl::Status AwaitAllWeights();
  // Uploads the weights of `params`, queued before the work that uses them
  // (the device copies them while it computes what was queued before),
  // once WeightsAwait says they are in weights().
  // Windowed: allocates them on the device first (once until released).
  void UploadWeights(const std::vector<int>& params);
  // Windowed: frees the device weights of `params` (no-op otherwise).
  void ReleaseWeights(const std::vector<int>& params);
  // Windowed: room on the device for the gradients of `params`.
  void AllocGrads(const std::vector<int>& params);
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
  // Reports the gradients of `params` ready in grads() (a model without a
  // device: worker/external).
  void ReportGrads(const std::vector<int>& params) {
    if (grads_ready_) grads_ready_(params);
  }

  kernels::Backend* backend_;
  const Stage stage_;
  const bool first_, last_;
  const bool windowed_;
  std::vector<bool> on_device_;  // windowed: weights uploaded and not released
  int64_t input_width_ = 0, output_width_ = 0;
  std::vector<ParamInfo> params_;
  std::vector<std::vector<float>> weights_;       // host
  std::vector<std::vector<float>> spare_weights_;  // KeepTwoWeightSets: the other set
  bool two_weight_sets_ = false;
  std::vector<std::vector<float>> grad_sets_[2];  // host; grad_set_ is the current one
  int grad_set_ = 0;
  std::vector<bool> grads_absent_;
  std::vector<const float*> grads_at_;
  std::vector<kernels::DeviceArray<float>> device_weights_, device_grads_;
  float loss_scale_ = 1.0f;
  bool host_sync_ = true;
  int64_t pinned_bytes_ = 0;
  GradsReady grads_ready_;
  WeightsAwait weights_await_;
  absl::Status weights_status_;  // the first failed WeightsAwait of the step
  // Downloads queued by Ready, with the fence after them, oldest first.
  std::vector<std::pair<int64_t, std::vector<int>>> pending_grads_;
};

// A completed, valid spec's model; `backend` outlives it. `recompute`: a
// GPT recomputes each block's activations in the backward instead of keeping
// them (the MLP keeps its few).
std::unique_ptr<Model> MakeModel(const ModelSpec& spec, kernels::Backend* backend,
                                 bool recompute = false);
// One stage of the model (one of PlanStages(spec, P)); a GPT windowed under
// `plan` when it is given (worker/models/gpt_model.h).
struct GptMemoryPlan;
std::unique_ptr<Model> MakeStageModel(const ModelSpec& spec, const Stage& stage,
                                      kernels::Backend* backend, bool recompute = false,
                                      const GptMemoryPlan* plan = nullptr);

// Rows [begin, end) of `batch`.
Batch SliceBatch(const Batch& batch, int begin, int end);

class MlpModel : public Model {
 public:
  MlpModel(const ModelSpec& spec, const Stage& stage, kernels::Backend* backend);
  absl::StatusOr<StepResult> Forward(int stash, const Batch& batch, const std::vector<float>* input,
                                     std::vector<float>* output, bool train) override;
  absl::Status Backward(int stash, const std::vector<float>* grad_output,
                        std::vector<float>* grad_input) override;

 private:
  struct Layer {
    LayerType type;
    int in = 0, out = 0;  // widths
    int param = -1;       // DENSE: index in params() of its weight (bias is param + 1)
  };
  using Array = kernels::DeviceArray<float>;
  // One micro-batch's activations.
  struct Stash {
    explicit Stash(kernels::Backend* b) : input(b), dloss(b), labels(b) {}
    int rows = 0;
    Array input, dloss;  // the stage's input; the last stage's d(loss)/d(logits)
    kernels::DeviceArray<int32_t> labels;
    std::vector<Array> acts;  // acts[i]: output of layer i
  };

  Stash& StashAt(int stash);
  // Sizes the stash's and the shared arrays; false when the device has no room.
  bool Reserve(Stash& s, int rows);
  // The output of layer i in stash s (the loss layer passes its input on).
  float* Output(Stash& s, int i);

  std::vector<Layer> layers_;  // this stage's
  std::vector<Stash> stashes_;
  Array delta_, delta_prev_;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_MODELS_MODEL_H_
