// The GPT of ModelSpec.gpt on a kernels::Backend: byte tokens in, the mean
// next-byte cross-entropy out (see GptSpec in proto/job.proto and the
// parameter list in common/params.h).
#ifndef PSTRAIN_WORKER_MODELS_GPT_MODEL_H_
#define PSTRAIN_WORKER_MODELS_GPT_MODEL_H_

#include <vector>

#include "worker/models/model.h"

namespace pstrain {

class GptModel : public Model {
 public:
  // With `recompute`, only the residual stream is kept between forward and
  // backward; each block's activations are computed again, one block at a
  // time, when the backward reaches it (less memory, one more forward).
  GptModel(const ModelSpec& spec, kernels::Backend* backend, bool recompute = false);
  absl::StatusOr<StepResult> TrainStep(const Batch& batch) override {
    return Run(batch, /*backward=*/true);
  }
  absl::StatusOr<StepResult> Evaluate(const Batch& batch) override {
    return Run(batch, /*backward=*/false);
  }

 private:
  using Array = kernels::DeviceArray<float>;
  // Indices into params() of one block's parameters.
  struct BlockParams {
    int ln1_gamma, ln1_beta, qkv_w, qkv_b, proj_w, proj_b;
    int ln2_gamma, ln2_beta, fc_w, fc_b, mlp_proj_w, mlp_proj_b;
    std::vector<int> All() const {
      return {ln1_gamma, ln1_beta, qkv_w,     qkv_b, proj_w,     proj_b,
              ln2_gamma, ln2_beta, fc_w,      fc_b,  mlp_proj_w, mlp_proj_b};
    }
  };
  // What one block's backward needs from its forward.
  struct BlockActs {
    explicit BlockActs(kernels::Backend* b)
        : a(b), mean1(b), rstd1(b), qkv(b), att(b), o(b), b(b), mean2(b), rstd2(b), h(b), g(b) {}
    Array a, mean1, rstd1, qkv, att, o;  // ln1 out, its stats, q|k|v, weights, attended
    Array b, mean2, rstd2, h, g;         // ln2 out, its stats, fc out, GELU out
  };

  absl::StatusOr<StepResult> Run(const Batch& batch, bool backward);
  void ForwardBlock(int i, int seqs, struct BlockActs& acts);
  // Takes dx_ (the gradient at the block's output) to the block's input.
  void BackwardBlock(int i, int seqs, struct BlockActs& acts);
  BlockActs& Acts(int i) { return acts_[recompute_ ? 0 : i]; }
  // Sizes the activations for `seqs` sequences; false when the device has no room.
  bool Reserve(int seqs);
  const float* W(int p) { return device_weights_[p].data(); }
  float* G(int p) { return device_grads_[p].data(); }

  const GptSpec gpt_;
  const bool recompute_;
  int wte_ = 0, wpe_ = 1, lnf_gamma_ = 0, lnf_beta_ = 0, head_ = 0;
  std::vector<BlockParams> block_params_;
  std::vector<BlockActs> acts_;
  // The residual stream: res_[2i] enters block i, res_[2i + 1] is after its
  // attention, res_[2L] leaves the last block.
  std::vector<Array> res_;
  Array xf_, meanf_, rstdf_, logits_, dlogits_, dx_, tmp_, tmp2_, tmp4_, dqkv_;
  kernels::DeviceArray<int32_t> ids_, pos_, targets_;
  std::vector<int32_t> host_pos_;
  std::vector<float> zeros_;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_MODELS_GPT_MODEL_H_
