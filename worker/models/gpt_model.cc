#include "worker/models/gpt_model.h"

#include <algorithm>

#include "common/params.h"

namespace pstrain {

GptModel::GptModel(const ModelSpec& spec, kernels::Backend* backend, bool recompute)
    : Model(spec, backend), gpt_(spec.gpt()), recompute_(recompute), xf_(backend), meanf_(backend), rstdf_(backend),
      logits_(backend), dlogits_(backend), dx_(backend), tmp_(backend), tmp2_(backend),
      tmp4_(backend), dqkv_(backend), ids_(backend), pos_(backend), targets_(backend) {
  // The order of common/params.cc's GptParams.
  int p = 2;
  for (int i = 0; i < gpt_.layers(); ++i) {
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
    if (!recompute_ || acts_.empty()) acts_.emplace_back(backend);
  }
  lnf_gamma_ = p++;
  lnf_beta_ = p++;
  head_ = p++;
  for (int i = 0; i <= 2 * gpt_.layers(); ++i) res_.emplace_back(backend);
  const int64_t c = gpt_.width();
  zeros_.assign(std::max<int64_t>(kGptVocab, gpt_.context()) * c, 0.0f);
}

bool GptModel::Reserve(int seqs) {
  const int64_t t = gpt_.context(), c = gpt_.width(), n = seqs * t;
  const int64_t att = static_cast<int64_t>(seqs) * gpt_.heads() * t * t;
  bool ok = ids_.Resize(n) && pos_.Resize(n) && targets_.Resize(n);
  for (BlockActs& a : acts_) {
    ok = ok && a.a.Resize(n * c) && a.mean1.Resize(n) && a.rstd1.Resize(n) &&
         a.qkv.Resize(n * 3 * c) && a.att.Resize(att) && a.o.Resize(n * c) && a.b.Resize(n * c) &&
         a.mean2.Resize(n) && a.rstd2.Resize(n) && a.h.Resize(n * 4 * c) && a.g.Resize(n * 4 * c);
  }
  for (Array& r : res_) ok = ok && r.Resize(n * c);
  return ok && xf_.Resize(n * c) && meanf_.Resize(n) && rstdf_.Resize(n) &&
         logits_.Resize(n * kGptVocab) && dlogits_.Resize(n * kGptVocab) && dx_.Resize(n * c) &&
         tmp_.Resize(n * c) && tmp2_.Resize(n * c) && tmp4_.Resize(n * 4 * c) &&
         dqkv_.Resize(n * 3 * c);
}

absl::StatusOr<StepResult> GptModel::Run(const Batch& batch, bool backward) {
  const int seqs = batch.rows, t = gpt_.context(), c = gpt_.width();
  const int n = seqs * t, layers = gpt_.layers();
  kernels::Backend* k = backend_;
  if (!Reserve(seqs)) return absl::ResourceExhaustedError(BackendStatus().message());
  if (static_cast<int>(host_pos_.size()) != n) {
    host_pos_.resize(n);
    for (int i = 0; i < n; ++i) host_pos_[i] = i % t;
  }
  ids_.Upload(batch.tokens.data());
  pos_.Upload(host_pos_.data());
  targets_.Upload(batch.labels.data());

  // Forward. Each layer's weights are queued for upload just before its
  // work, so the device copies the next while it computes this one.
  UploadWeights({wte_, wpe_});
  k->Embedding(n, c, ids_.data(), W(wte_), res_[0].data(), false);
  k->Embedding(n, c, pos_.data(), W(wpe_), res_[0].data(), true);
  for (int i = 0; i < layers; ++i) {
    UploadWeights(block_params_[i].All());
    ForwardBlock(i, seqs, Acts(i));
  }
  UploadWeights({lnf_gamma_, lnf_beta_, head_});
  const float* last = res_[2 * layers].data();
  k->LayerNorm(n, c, last, W(lnf_gamma_), W(lnf_beta_), xf_.data(), meanf_.data(),
               rstdf_.data());
  k->Gemm(false, false, n, kGptVocab, c, 1.0f, xf_.data(), W(head_), 0.0f, logits_.data());
  StepResult result;
  int correct = 0;
  result.loss = k->SoftmaxXent(n, kGptVocab, logits_.data(), targets_.data(),
                               backward ? dlogits_.data() : nullptr, &correct);
  result.correct = correct;
  result.predicted = n;
  if (backward && loss_scale_ != 1.0f) {
    k->Scale(static_cast<int64_t>(n) * kGptVocab, loss_scale_, dlogits_.data());
  }

  if (backward) {
    k->Gemm(true, false, c, kGptVocab, n, 1.0f, xf_.data(), dlogits_.data(), 0.0f, G(head_));
    k->Gemm(false, true, n, c, kGptVocab, 1.0f, dlogits_.data(), W(head_), 0.0f, tmp_.data());
    k->LayerNormBackward(n, c, last, W(lnf_gamma_), meanf_.data(), rstdf_.data(), tmp_.data(),
                         dx_.data(), G(lnf_gamma_), G(lnf_beta_));
    Ready({head_, lnf_gamma_, lnf_beta_});
    // dx_: the gradient of the residual stream, walking down.
    for (int i = layers - 1; i >= 0; --i) {
      // With recomputation the block's activations are made again from its
      // input, which the residual stream kept.
      if (recompute_) ForwardBlock(i, seqs, Acts(i));
      BackwardBlock(i, seqs, Acts(i));
      Ready(block_params_[i].All());
    }
    device_grads_[wte_].Upload(zeros_.data());
    device_grads_[wpe_].Upload(zeros_.data());
    k->EmbeddingBackward(n, c, ids_.data(), dx_.data(), G(wte_));
    k->EmbeddingBackward(n, c, pos_.data(), dx_.data(), G(wpe_));
    Ready({wte_, wpe_});
    FinishGrads();
  }
  const absl::Status st = BackendStatus();
  if (!st.ok()) return st;
  return result;
}

void GptModel::ForwardBlock(int i, int seqs, BlockActs& a) {
  const int t = gpt_.context(), c = gpt_.width(), heads = gpt_.heads(), n = seqs * t;
  kernels::Backend* k = backend_;
  const BlockParams& p = block_params_[i];
  float* in = res_[2 * i].data();
  float* mid = res_[2 * i + 1].data();
  float* out = res_[2 * i + 2].data();
  k->LayerNorm(n, c, in, W(p.ln1_gamma), W(p.ln1_beta), a.a.data(), a.mean1.data(),
               a.rstd1.data());
  k->Gemm(false, false, n, 3 * c, c, 1.0f, a.a.data(), W(p.qkv_w), 0.0f, a.qkv.data());
  k->AddBias(n, 3 * c, W(p.qkv_b), a.qkv.data());
  k->Attention(seqs, t, heads, c / heads, a.qkv.data(), a.att.data(), a.o.data());
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

void GptModel::BackwardBlock(int i, int seqs, BlockActs& a) {
  const int t = gpt_.context(), c = gpt_.width(), heads = gpt_.heads(), n = seqs * t;
  const int64_t nc = static_cast<int64_t>(n) * c;
  kernels::Backend* k = backend_;
  const BlockParams& p = block_params_[i];
  const float* in = res_[2 * i].data();
  const float* mid = res_[2 * i + 1].data();
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
  k->AttentionBackward(seqs, t, heads, c / heads, a.qkv.data(), a.att.data(), tmp_.data(),
                       dqkv_.data());
  k->Gemm(true, false, c, 3 * c, n, 1.0f, a.a.data(), dqkv_.data(), 0.0f, G(p.qkv_w));
  k->BiasGrad(n, 3 * c, dqkv_.data(), G(p.qkv_b));
  k->Gemm(false, true, n, c, 3 * c, 1.0f, dqkv_.data(), W(p.qkv_w), 0.0f, tmp_.data());
  k->LayerNormBackward(n, c, in, W(p.ln1_gamma), a.mean1.data(), a.rstd1.data(), tmp_.data(),
                       tmp2_.data(), G(p.ln1_gamma), G(p.ln1_beta));
  k->Axpy(nc, 1.0f, tmp2_.data(), dx_.data());
}

}  // namespace pstrain
