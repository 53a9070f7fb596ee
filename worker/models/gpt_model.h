// The GPT of ModelSpec.gpt on a kernels::Backend: byte tokens in, the mean
// next-byte cross-entropy out (see GptSpec in proto/job.proto and the
// parameter list in common/params.h).
#ifndef PSTRAIN_WORKER_MODELS_GPT_MODEL_H_
#define PSTRAIN_WORKER_MODELS_GPT_MODEL_H_

#include <string>
#include <vector>

#include "worker/models/model.h"

namespace pstrain {

// A GPT stage's device memory under a budget (ps_worker
// --device_memory_budget): a window of units' (the embeddings', each
// block's, the head's) weights and one unit's gradients on the device at
// once, and every micro-batch's activations kept, or, when they do not fit,
// recomputed block by block in the backward (only the residual stream
// kept). Sizes as the backend allocates them (64-byte multiples).
struct GptMemoryPlan {
  int64_t budget = 0;
  bool recompute = false;
  int64_t window_bytes = 0;      // the most weights and gradients at once
  int64_t activation_bytes = 0;  // every stash's and the shared work arrays
  int64_t peak_bytes = 0;        // window + activations
  int64_t model_bytes = 0;       // the stage's weights + gradients, all resident
  int64_t unbudgeted_bytes = 0;  // all resident with every activation kept
  // Each micro-batch of the job run as `split` of `seqs` sequences, their
  // gradients added up (only when nothing else fits, and only without
  // pipeline stages); evaluation `eval_seqs` sequences at once.
  int split = 1;
  int seqs = 0;
  int eval_seqs = 0;
  std::string Describe() const;
};

// The plan for `stage` training micro-batches of `seqs` sequences with
// `stashes` of them in flight and evaluating up to `eval_seqs` at once:
// activations kept if they fit, else recomputed, else (`may_split`) the
// micro-batches split further. INVALID_ARGUMENT, giving the minimum, when
// nothing fits the budget.
absl::StatusOr<GptMemoryPlan> PlanGptMemory(const ModelSpec& spec, const Stage& stage, int seqs,
                                            int stashes, int eval_seqs, int64_t budget,
                                            bool may_split = false);

class GptModel : public Model {
 public:
  // With `recompute`, only the residual stream is kept between forward and
  // backward; each block's activations are computed again, one block at a
  // time, when the backward reaches it (less memory, one more forward).
  // With `plan`, windowed (see Model) and recomputing as it says.
  GptModel(const ModelSpec& spec, const Stage& stage, kernels::Backend* backend,
           bool recompute = false, const GptMemoryPlan* plan = nullptr);
  absl::StatusOr<StepResult> Forward(int stash, const Batch& batch, const std::vector<float>* input,
                                     std::vector<float>* output, bool train) override;
  absl::Status Backward(int stash, const std::vector<float>* grad_output,
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
        : a(b), mean1(b), rstd1(b), qkv(b), lse(b), o(b), b(b), mean2(b), rstd2(b), h(b), g(b) {}
    Array a, mean1, rstd1, qkv, lse, o;  // ln1 out, its stats, q|k|v, scores' lse, attended
    Array b, mean2, rstd2, h, g;         // ln2 out, its stats, fc out, GELU out
  };
  // One micro-batch's activations: the residual stream (res[2j] enters the
  // stage's block j, res[2j + 1] is after its attention, the last leaves
  // the stage), the blocks' (none with recomputation), the final LayerNorm's
  // and the loss's gradient (last stage), the tokens (first stage).
  struct Stash {
    explicit Stash(kernels::Backend* b)
        : xf(b), meanf(b), rstdf(b), dlogits(b), ids(b), pos(b), targets(b) {}
    int seqs = 0;
    std::vector<Array> res;
    std::vector<BlockActs> blocks;
    Array xf, meanf, rstdf, dlogits;
    IntArray ids, pos, targets;
  };

  Stash& StashAt(int stash);
  // Sizes the stash's and the shared arrays for `seqs` sequences; false when
  // the device has no room.
  bool Reserve(Stash& s, int seqs);
  bool ReserveBlocks(std::vector<BlockActs>& blocks, int64_t n);
  // The first stage's embeddings of the batch's tokens into s.res[0].
  void Embed(Stash& s);
  // The last stage's final LayerNorm, head and loss.
  StepResult Head(Stash& s, bool train);
  // The head's and the final LayerNorm's backward into dx_.
  void HeadBackward(Stash& s);
  void ForwardBlock(int j, Stash& s);
  // Takes dx_ (the gradient at the block's output) to the block's input.
  void BackwardBlock(int j, Stash& s);
  BlockActs& Acts(Stash& s, int j) { return recompute_ ? shared_acts_.front() : s.blocks[j]; }
  // Windowed: uploads unit `u`'s weights ahead of their use (no-op past the
  // last unit or when not windowed).
  void Prefetch(int u);
  int BlockUnit(int j) const { return (first_ ? 1 : 0) + j; }
  const float* W(int p) { return device_weights_[p].data(); }
  float* G(int p) { return device_grads_[p].data(); }

  const GptSpec gpt_;
  const bool recompute_;
  // params() indices; -1 where another stage holds them.
  int wte_ = -1, wpe_ = -1, lnf_gamma_ = -1, lnf_beta_ = -1, head_ = -1;
  std::vector<BlockParams> block_params_;  // this stage's blocks
  std::vector<std::vector<int>> units_;    // params of each unit, in forward order
  std::vector<Stash> stashes_;
  std::vector<BlockActs> shared_acts_;  // with recomputation: one for every stash
  Array logits_, dx_, tmp_, tmp2_, tmp4_, dqkv_;
  std::vector<int32_t> host_pos_;
  std::vector<float> zeros_;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_MODELS_GPT_MODEL_H_
