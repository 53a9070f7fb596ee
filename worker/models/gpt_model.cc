#include "worker/models/gpt_model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/params.h"
#include "common/status_macros.h"

namespace pstrain {

namespace {

// Bytes the backend allocates for n elements of 4 bytes (64-byte multiples).
int64_t Arr(int64_t n) { return (std::max<int64_t>(n * 4, 1) + 63) / 64 * 64; }

// One block's kept activations for n tokens (BlockActs): no [seq, seq]
// array, attention keeping only each query's log-sum-exp per head.
int64_t BlockActBytes(int64_t n, int64_t c, int64_t heads) {
  return 4 * Arr(n) + 3 * Arr(n * c) + Arr(n * 3 * c) + Arr(n * heads) + 2 * Arr(n * 4 * c);
}

}  // namespace

std::string GptMemoryPlan::Describe() const {
  return absl::StrCat(
      "memory plan: budget ", budget, " bytes; weights and gradients of 2 units (embeddings, ",
      "a block, the head) at once, at most ", window_bytes, " bytes (all resident: ", model_bytes,
      "); activations ",
      recompute ? "recomputed block by block (the residual stream kept), " : "kept, ",
      activation_bytes, " bytes",
      split > 1 ? absl::StrCat(", each micro-batch run as ", split, " of ", seqs,
                               " sequences (gradients added up)")
                : "",
      "; evaluation ", eval_seqs, " sequences at once; peak expected ", peak_bytes,
      " (without a budget: ", unbudgeted_bytes, ")");
}

namespace {

// A stage's device bytes, as GptModel allocates them.
struct GptSizes {
  int64_t t, c, heads;
  int blocks;
  bool first, last;
  // Each stash's (stash 0 also holds an evaluation batch) and the work
  // arrays shared by every stash (sized for the largest batch), for
  // micro-batches of `seqs` sequences.
  int64_t Activations(int seqs, int stashes, int eval_seqs, bool keep) const {
    const int64_t n = seqs * t, n_max = std::max(seqs, eval_seqs) * t;
    int64_t b = Stash(n_max, keep) + (stashes - 1) * Stash(n, keep);
    b += 3 * Arr(n_max * c) + Arr(n_max * 4 * c) + Arr(n_max * 3 * c);
    if (last) b += Arr(n_max * kGptVocab);
    if (!keep) b += BlockActBytes(n_max, c, heads);
    return b;
  }
  int64_t Stash(int64_t rows, bool keep) const {
    int64_t b = (2 * blocks + 1) * Arr(rows * c);
    if (keep) b += blocks * BlockActBytes(rows, c, heads);
    if (first) b += 2 * Arr(rows);
    if (last) b += 3 * Arr(rows) + Arr(rows * c) + Arr(rows * kGptVocab);
    return b;
  }
};

}  // namespace

absl::StatusOr<GptMemoryPlan> PlanGptMemory(const ModelSpec& spec, const Stage& stage, int seqs,
                                            int stashes, int eval_seqs, int64_t budget,
                                            bool may_split) {
  const GptSpec& gpt = spec.gpt();
  const int units = static_cast<int>(ModelUnits(spec).size());
  const GptSizes z{gpt.context(),         gpt.width(),
                   gpt.heads(),           stage.end_layer - stage.first_layer,
                   stage.first_unit == 0, stage.end_unit == units};
  // Each unit's weights (its gradients are as large), in forward order.
  const std::vector<ParamInfo> all = ModelParams(spec);
  std::vector<int64_t> unit;
  int p = stage.first_param;
  auto take = [&](int n) {
    int64_t bytes = 0;
    for (int i = 0; i < n; ++i) bytes += Arr(all[p++].numel);
    unit.push_back(bytes);
  };
  if (z.first) take(2);
  for (int j = 0; j < z.blocks; ++j) take(12);
  if (z.last) take(3);
  GptMemoryPlan plan;
  plan.budget = budget;
  for (size_t u = 0; u < unit.size(); ++u) {
    const int64_t before = u > 0 ? unit[u - 1] : 0, after = u + 1 < unit.size() ? unit[u + 1] : 0;
    plan.window_bytes = std::max(plan.window_bytes, 2 * unit[u] + std::max(before, after));
    plan.model_bytes += 2 * unit[u];
  }
  plan.unbudgeted_bytes = plan.model_bytes + z.Activations(seqs, stashes, eval_seqs, true);
  // Kept, in smaller micro-batches if need be (one stage only: a pipeline's
  // micro-batches are its stages' agreement); else recomputed, the same way.
  // (Splitting costs less than recomputing: a smaller batch's products run
  // nearly as fast, a recomputed block is a third more work.)
  for (bool keep : {true, false}) {
    for (int split = 1; split <= (may_split ? seqs : 1); ++split) {
      if (seqs % split != 0) continue;
      const int now = seqs / split, eval = std::min(eval_seqs, now);
      plan.split = split;
      plan.seqs = now;
      plan.eval_seqs = eval;
      plan.recompute = !keep;
      plan.activation_bytes = z.Activations(now, stashes, eval, keep);
      plan.peak_bytes = plan.window_bytes + plan.activation_bytes;
      if (plan.peak_bytes <= budget) return plan;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--device_memory_budget=", budget, " is below this stage's minimum of ", plan.peak_bytes,
      " bytes (two units' weights and one's gradients: ", plan.window_bytes, "; activations of ",
      plan.seqs, "-sequence micro-batches, ", stashes,
      " in flight, recomputed: ", plan.activation_bytes, ")"));
}

GptModel::GptModel(const ModelSpec& spec, const Stage& stage, kernels::Backend* backend,
                   bool recompute, const GptMemoryPlan* plan)
    : Model(spec, stage, backend, /*windowed=*/plan != nullptr),
      gpt_(spec.gpt()),
      recompute_(recompute || (plan != nullptr && plan->recompute)),
      logits_(backend),
      dx_(backend),
      tmp_(backend),
      tmp2_(backend),
      tmp4_(backend),
      dqkv_(backend) {
  // The order of common/params.cc's GptParams, from this stage's first.
  int p = 0;
  if (first_) {
    wte_ = p++;
    wpe_ = p++;
  }
  for (int i = stage.first_layer; i < stage.end_layer; ++i) {
    BlockParams b;
    b.ln1_gamma = p++;
    b.ln1_beta = p++;
    b.qkv_w = p++;
    b.qkv_b = p++;
    b.proj_w = p++;
    b.proj_b = p++;
    b.ln2_gamma = p++;
    b.ln2_beta = p++;
    b.fc_w = p++;
    b.fc_b = p++;
    b.mlp_proj_w = p++;
    b.mlp_proj_b = p++;
    block_params_.push_back(b);
  }
  if (last_) {
    lnf_gamma_ = p++;
    lnf_beta_ = p++;
    head_ = p++;
  }
  if (first_) units_.push_back({wte_, wpe_});
  for (const BlockParams& b : block_params_) units_.push_back(b.All());
  if (last_) units_.push_back({lnf_gamma_, lnf_beta_, head_});
  if (recompute_) shared_acts_.emplace_back(backend);
  const int64_t c = gpt_.width();
  input_width_ = output_width_ = gpt_.context() * c;
  zeros_.assign(std::max<int64_t>(kGptVocab, gpt_.context()) * c, 0.0f);
}

GptModel::Stash& GptModel::StashAt(int stash) {
  const int blocks = static_cast<int>(block_params_.size());
  while (static_cast<int>(stashes_.size()) <= stash) {
    Stash& s = stashes_.emplace_back(backend_);
    for (int i = 0; i <= 2 * blocks; ++i) s.res.emplace_back(backend_);
    for (int i = 0; !recompute_ && i < blocks; ++i) s.blocks.emplace_back(backend_);
  }
  return stashes_[stash];
}

bool GptModel::ReserveBlocks(std::vector<BlockActs>& blocks, int64_t n) {
  const int64_t c = gpt_.width();
  bool ok = true;
  for (BlockActs& a : blocks) {
    ok = ok && a.a.Resize(n * c) && a.mean1.Resize(n) && a.rstd1.Resize(n) &&
         a.qkv.Resize(n * 3 * c) && a.lse.Resize(n * gpt_.heads()) && a.o.Resize(n * c) &&
         a.b.Resize(n * c) && a.mean2.Resize(n) && a.rstd2.Resize(n) && a.h.Resize(n * 4 * c) &&
         a.g.Resize(n * 4 * c);
  }
  return ok;
}

bool GptModel::Reserve(Stash& s, int seqs) {
  const int64_t t = gpt_.context(), c = gpt_.width(), n = seqs * t;
  bool ok = !first_ || (s.ids.Resize(n) && s.pos.Resize(n));
  ok = ok && (!last_ || (s.targets.Resize(n) && s.xf.Resize(n * c) && s.meanf.Resize(n) &&
                         s.rstdf.Resize(n) && s.dlogits.Resize(n * kGptVocab) &&
                         logits_.Resize(n * kGptVocab)));
  ok = ok && ReserveBlocks(recompute_ ? shared_acts_ : s.blocks, n);
  for (Array& r : s.res) ok = ok && r.Resize(n * c);
  return ok && dx_.Resize(n * c) && tmp_.Resize(n * c) && tmp2_.Resize(n * c) &&
         tmp4_.Resize(n * 4 * c) && dqkv_.Resize(n * 3 * c);
}

void GptModel::Embed(Stash& s) {
  const int n = s.seqs * gpt_.context(), c = gpt_.width();
  UploadWeights({wte_, wpe_});
  backend_->Embedding(n, c, s.ids.data(), W(wte_), s.res[0].data(), false);
  backend_->Embedding(n, c, s.pos.data(), W(wpe_), s.res[0].data(), true);
}

StepResult GptModel::Head(Stash& s, bool train) {
  const int n = s.seqs * gpt_.context(), c = gpt_.width();
  kernels::Backend* k = backend_;
  UploadWeights({lnf_gamma_, lnf_beta_, head_});
  const float* last = s.res.back().data();
  k->LayerNorm(n, c, last, W(lnf_gamma_), W(lnf_beta_), s.xf.data(), s.meanf.data(),
               s.rstdf.data());
  k->Gemm(false, false, n, kGptVocab, c, 1.0f, s.xf.data(), W(head_), 0.0f, logits_.data());
  StepResult result;
  int correct = 0;
  result.loss = k->SoftmaxXent(n, kGptVocab, logits_.data(), s.targets.data(),
                               train ? s.dlogits.data() : nullptr, &correct);
  result.correct = correct;
  result.predicted = n;
  if (train && loss_scale_ != 1.0f) {
    k->Scale(static_cast<int64_t>(n) * kGptVocab, loss_scale_, s.dlogits.data());
  }
  return result;
}

absl::StatusOr<StepResult> GptModel::Forward(int stash, const Batch& batch,
                                             const std::vector<float>* input,
                                             std::vector<float>* output, bool train) {
  const int seqs = batch.rows, t = gpt_.context();
  const int n = seqs * t;
  if (!first_) RETURN_IF_ERROR(CheckSize(input, seqs, input_width_, "stage input"));
  Stash& s = StashAt(stash);
  s.seqs = seqs;
  if (!Reserve(s, seqs)) return absl::ResourceExhaustedError(BackendStatus().message());
  if (first_) {
    if (static_cast<int>(host_pos_.size()) != n) {
      host_pos_.resize(n);
      for (int i = 0; i < n; ++i) host_pos_[i] = i % t;
    }
    s.ids.Upload(batch.tokens.data());
    s.pos.Upload(host_pos_.data());
  }
  if (last_) s.targets.Upload(batch.labels.data());
  // Each layer's weights are queued for upload just before its work, so the
  // device copies the next while it computes this one (windowed: the next
  // unit's are queued before this one's work, and this one's go after it).
  if (first_) {
    Prefetch(1);
    Embed(s);
    ReleaseWeights(units_[0]);
  } else {
    s.res[0].Upload(input->data());
  }
  for (int j = 0; j < static_cast<int>(block_params_.size()); ++j) {
    UploadWeights(block_params_[j].All());
    Prefetch(BlockUnit(j) + 1);
    ForwardBlock(j, s);
    ReleaseWeights(block_params_[j].All());
  }
  StepResult result;
  if (last_) {
    result = Head(s, train);
    ReleaseWeights(units_.back());
  } else {
    output->resize(static_cast<size_t>(seqs) * output_width_);
    s.res.back().Download(output->data());
  }
  RETURN_IF_ERROR(BackendStatus());
  return result;
}

void GptModel::HeadBackward(Stash& s) {
  const int n = s.seqs * gpt_.context(), c = gpt_.width();
  kernels::Backend* k = backend_;
  k->Gemm(true, false, c, kGptVocab, n, 1.0f, s.xf.data(), s.dlogits.data(), 0.0f, G(head_));
  k->Gemm(false, true, n, c, kGptVocab, 1.0f, s.dlogits.data(), W(head_), 0.0f, tmp_.data());
  k->LayerNormBackward(n, c, s.res.back().data(), W(lnf_gamma_), s.meanf.data(), s.rstdf.data(),
                       tmp_.data(), dx_.data(), G(lnf_gamma_), G(lnf_beta_));
  Ready({head_, lnf_gamma_, lnf_beta_});
}

absl::Status GptModel::Backward(int stash, const std::vector<float>* grad_output,
                                std::vector<float>* grad_input) {
  Stash& s = stashes_.at(stash);
  const int n = s.seqs * gpt_.context(), c = gpt_.width();
  // dx_: the gradient of the residual stream, walking down.
  if (last_) {
    if (windowed_) UploadWeights(units_.back());  // else still there from the forward
    AllocGrads(units_.back());
    if (!block_params_.empty()) Prefetch(BlockUnit(static_cast<int>(block_params_.size()) - 1));
    HeadBackward(s);
    ReleaseWeights(units_.back());
  } else {
    RETURN_IF_ERROR(CheckSize(grad_output, s.seqs, output_width_, "stage output gradient"));
    backend_->Upload(grad_output->data(), grad_output->size() * sizeof(float), dx_.data());
  }
  for (int j = static_cast<int>(block_params_.size()) - 1; j >= 0; --j) {
    // With recomputation the block's activations are made again from its
    // input, which the residual stream kept.
    if (windowed_) UploadWeights(block_params_[j].All());
    if (j > 0) Prefetch(BlockUnit(j - 1));
    AllocGrads(block_params_[j].All());
    if (recompute_) ForwardBlock(j, s);
    BackwardBlock(j, s);
    Ready(block_params_[j].All());
    ReleaseWeights(block_params_[j].All());
  }
  if (first_) {
    AllocGrads(units_[0]);
    device_grads_[wte_].Upload(zeros_.data());
    device_grads_[wpe_].Upload(zeros_.data());
    backend_->EmbeddingBackward(n, c, s.ids.data(), dx_.data(), G(wte_));
    backend_->EmbeddingBackward(n, c, s.pos.data(), dx_.data(), G(wpe_));
    Ready({wte_, wpe_});
  } else {
    grad_input->resize(static_cast<size_t>(n) * c);
    backend_->Download(dx_.data(), grad_input->size() * sizeof(float), grad_input->data());
  }
  FinishGrads();
  return BackendStatus();
}

void GptModel::Prefetch(int u) {
  if (windowed_ && u < static_cast<int>(units_.size())) UploadWeights(units_[u]);
}

void GptModel::ForwardBlock(int j, Stash& s) {
  const int t = gpt_.context(), c = gpt_.width(), heads = gpt_.heads(), seqs = s.seqs;
  const int n = seqs * t;
  kernels::Backend* k = backend_;
  const BlockParams& p = block_params_[j];
  BlockActs& a = Acts(s, j);
  float* in = s.res[2 * j].data();
  float* mid = s.res[2 * j + 1].data();
  float* out = s.res[2 * j + 2].data();
  k->LayerNorm(n, c, in, W(p.ln1_gamma), W(p.ln1_beta), a.a.data(), a.mean1.data(), a.rstd1.data());
  k->Gemm(false, false, n, 3 * c, c, 1.0f, a.a.data(), W(p.qkv_w), 0.0f, a.qkv.data());
  k->AddBias(n, 3 * c, W(p.qkv_b), a.qkv.data());
  k->Attention(seqs, t, heads, c / heads, a.qkv.data(), a.lse.data(), a.o.data());
  k->Gemm(false, false, n, c, c, 1.0f, a.o.data(), W(p.proj_w), 0.0f, mid);
  k->AddBias(n, c, W(p.proj_b), mid);
  k->Axpy(static_cast<int64_t>(n) * c, 1.0f, in, mid);
  k->LayerNorm(n, c, mid, W(p.ln2_gamma), W(p.ln2_beta), a.b.data(), a.mean2.data(),
               a.rstd2.data());
  k->Gemm(false, false, n, 4 * c, c, 1.0f, a.b.data(), W(p.fc_w), 0.0f, a.h.data());
  k->AddBias(n, 4 * c, W(p.fc_b), a.h.data());
  k->Gelu(static_cast<int64_t>(n) * 4 * c, a.h.data(), a.g.data());
  k->Gemm(false, false, n, c, 4 * c, 1.0f, a.g.data(), W(p.mlp_proj_w), 0.0f, out);
  k->AddBias(n, c, W(p.mlp_proj_b), out);
  k->Axpy(static_cast<int64_t>(n) * c, 1.0f, mid, out);
}

void GptModel::BackwardBlock(int j, Stash& s) {
  const int t = gpt_.context(), c = gpt_.width(), heads = gpt_.heads(), seqs = s.seqs;
  const int n = seqs * t;
  const int64_t nc = static_cast<int64_t>(n) * c;
  kernels::Backend* k = backend_;
  const BlockParams& p = block_params_[j];
  BlockActs& a = Acts(s, j);
  const float* in = s.res[2 * j].data();
  const float* mid = s.res[2 * j + 1].data();
  // out = mid + g Wmp + bmp
  k->Gemm(true, false, 4 * c, c, n, 1.0f, a.g.data(), dx_.data(), 0.0f, G(p.mlp_proj_w));
  k->BiasGrad(n, c, dx_.data(), G(p.mlp_proj_b));
  k->Gemm(false, true, n, 4 * c, c, 1.0f, dx_.data(), W(p.mlp_proj_w), 0.0f, tmp4_.data());
  k->GeluBackward(static_cast<int64_t>(n) * 4 * c, a.h.data(), tmp4_.data(), tmp4_.data());
  k->Gemm(true, false, c, 4 * c, n, 1.0f, a.b.data(), tmp4_.data(), 0.0f, G(p.fc_w));
  k->BiasGrad(n, 4 * c, tmp4_.data(), G(p.fc_b));
  k->Gemm(false, true, n, c, 4 * c, 1.0f, tmp4_.data(), W(p.fc_w), 0.0f, tmp_.data());
  k->LayerNormBackward(n, c, mid, W(p.ln2_gamma), a.mean2.data(), a.rstd2.data(), tmp_.data(),
                       tmp2_.data(), G(p.ln2_gamma), G(p.ln2_beta));
  k->Axpy(nc, 1.0f, tmp2_.data(), dx_.data());
  // mid = in + o Wp + bp
  k->Gemm(true, false, c, c, n, 1.0f, a.o.data(), dx_.data(), 0.0f, G(p.proj_w));
  k->BiasGrad(n, c, dx_.data(), G(p.proj_b));
  k->Gemm(false, true, n, c, c, 1.0f, dx_.data(), W(p.proj_w), 0.0f, tmp_.data());
  k->AttentionBackward(seqs, t, heads, c / heads, a.qkv.data(), a.o.data(), a.lse.data(),
                       tmp_.data(), dqkv_.data());
  k->Gemm(true, false, c, 3 * c, n, 1.0f, a.a.data(), dqkv_.data(), 0.0f, G(p.qkv_w));
  k->BiasGrad(n, 3 * c, dqkv_.data(), G(p.qkv_b));
  k->Gemm(false, true, n, c, 3 * c, 1.0f, dqkv_.data(), W(p.qkv_w), 0.0f, tmp_.data());
  k->LayerNormBackward(n, c, in, W(p.ln1_gamma), a.mean1.data(), a.rstd1.data(), tmp_.data(),
                       tmp2_.data(), G(p.ln1_gamma), G(p.ln1_beta));
  k->Axpy(nc, 1.0f, tmp2_.data(), dx_.data());
}

}  // namespace pstrain
