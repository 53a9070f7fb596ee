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
  GptModel(const ModelSpec& spec, const Stage& stage, kernels::Backend* backend,
           bool recompute = false);
  absl::StatusOr<StepResult> Forward(int slot, const Batch& batch, const std::vector<float>* input,
                                     std::vector<float>* output, bool train) override;
  absl::Status Backward(int slot, const std::vector<float>* grad_output,
                        std::vector<float>* grad_input) override;

 private:
  using Array = kernels::DeviceArray<float>;
  using IntArray = kernels::DeviceArray<int32_t>;
  // Indices into params() of one block's parameters.
  struct BlockParams {
    int ln1_gamma, ln1_beta, qkv_w, qkv_b, proj_w, proj_b;
    int ln2_gamma, ln2_beta, fc_w, fc_b, mlp_proj_w, mlp_proj_b;
    std::vector<int> All() const {
      return {ln1_gamma, ln1_beta, qkv_w, qkv_b, proj_w,     proj_b,
              ln2_gamma, ln2_beta, fc_w,  fc_b,  mlp_proj_w, mlp_proj_b};
    }
  };
  // What one block's backward needs from its forward.
  struct BlockActs {
    explicit BlockActs(kernels::Backend* b)
        : a(b), mean1(b), rstd1(b), qkv(b), att(b), o(b), b(b), mean2(b), rstd2(b), h(b), g(b) {}
    Array a, mean1, rstd1, qkv, att, o;  // ln1 out, its stats, q|k|v, weights, attended
    Array b, mean2, rstd2, h, g;         // ln2 out, its stats, fc out, GELU out
  };
  // One micro-batch's activations: the residual stream (res[2j] enters the
  // stage's block j, res[2j + 1] is after its attention, the last leaves
  // the stage), the blocks' (none with recomputation), the final LayerNorm's
  // and the loss's gradient (last stage), the tokens (first stage).
  struct Slot {
    explicit Slot(kernels::Backend* b)
        : xf(b), meanf(b), rstdf(b), dlogits(b), ids(b), pos(b), targets(b) {}
    int seqs = 0;
    std::vector<Array> res;
    std::vector<BlockActs> blocks;
    Array xf, meanf, rstdf, dlogits;
    IntArray ids, pos, targets;
  };

  Slot& SlotAt(int slot);
  // Sizes the slot's and the shared arrays for `seqs` sequences; false when
  // the device has no room.
  bool Reserve(Slot& s, int seqs);
  bool ReserveBlocks(std::vector<BlockActs>& blocks, int64_t n, int64_t att);
  // The first stage's embeddings of the batch's tokens into s.res[0].
  void Embed(Slot& s);
  // The last stage's final LayerNorm, head and loss.
  StepResult Head(Slot& s, bool train);
  // The head's and the final LayerNorm's backward into dx_.
  void HeadBackward(Slot& s);
  void ForwardBlock(int j, Slot& s);
  // Takes dx_ (the gradient at the block's output) to the block's input.
  void BackwardBlock(int j, Slot& s);
  BlockActs& Acts(Slot& s, int j) { return recompute_ ? shared_acts_.front() : s.blocks[j]; }
  const float* W(int p) { return device_weights_[p].data(); }
  float* G(int p) { return device_grads_[p].data(); }

  const GptSpec gpt_;
  const bool recompute_;
  // params() indices; -1 where another stage holds them.
  int wte_ = -1, wpe_ = -1, lnf_gamma_ = -1, lnf_beta_ = -1, head_ = -1;
  std::vector<BlockParams> block_params_;  // this stage's blocks
  std::vector<Slot> slots_;
  std::vector<BlockActs> shared_acts_;  // with recomputation: one for every slot
  Array logits_, dx_, tmp_, tmp2_, tmp4_, dqkv_;
  std::vector<int32_t> host_pos_;
  std::vector<float> zeros_;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_MODELS_GPT_MODEL_H_
