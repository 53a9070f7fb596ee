#include "worker/models/model.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/models/gpt_model.h"

namespace pstrain {

Model::Model(const ModelSpec& spec, const Stage& stage, kernels::Backend* backend, bool windowed)
    : backend_(backend),
      stage_(stage),
      first_(stage.first_unit == 0),
      last_(stage.end_unit == static_cast<int>(ModelUnits(spec).size())),
      windowed_(windowed) {
  const std::vector<ParamInfo> all = ModelParams(spec);
  params_.assign(all.begin() + stage.first_param, all.begin() + stage.end_param);
  for (const ParamInfo& p : params_) {
    weights_.push_back(kernels::PinnableVector(p.numel));
    for (auto& set : grad_sets_) set.push_back(kernels::PinnableVector(p.numel));
    device_weights_.emplace_back(backend, windowed ? 0 : p.numel);
    device_grads_.emplace_back(backend, windowed ? 0 : p.numel);
  }
  on_device_.assign(params_.size(), false);
  for (auto* host : {&weights_, &grad_sets_[0], &grad_sets_[1]}) {
    for (std::vector<float>& v : *host) {
      const int64_t bytes = static_cast<int64_t>(v.size() * sizeof(float));
      if (backend_->PinHost(v.data(), bytes)) pinned_bytes_ += bytes;
    }
  }
}

Model::~Model() {
  for (auto* host : {&weights_, &spare_weights_, &grad_sets_[0], &grad_sets_[1]}) {
    for (std::vector<float>& v : *host) backend_->UnpinHost(v.data());
  }
}

void Model::KeepTwoWeightSets() {
  if (two_weight_sets_) return;
  two_weight_sets_ = true;
  for (const ParamInfo& p : params_) {
    spare_weights_.push_back(kernels::PinnableVector(p.numel));
    std::vector<float>& v = spare_weights_.back();
    const int64_t bytes = static_cast<int64_t>(v.size() * sizeof(float));
    if (backend_->PinHost(v.data(), bytes)) pinned_bytes_ += bytes;
  }
}

absl::Status Model::AwaitWeights(const std::vector<int>& params) {
  if (!weights_await_) return absl::OkStatus();
  absl::Status st = weights_await_(params);
  if (weights_status_.ok()) weights_status_ = st;
  return st;
}

absl::Status Model::AwaitAllWeights() {
  std::vector<int> all(params_.size());
  for (size_t p = 0; p < all.size(); ++p) all[p] = static_cast<int>(p);
  return AwaitWeights(all);
}

void Model::UploadWeights(const std::vector<int>& params) {
  if (windowed_ || host_sync_) (void)AwaitWeights(params);  // (an error: TrainStep's)
  if (windowed_) {
    for (int p : params) {
      if (on_device_[p] || !device_weights_[p].Resize(params_[p].numel)) continue;
      device_weights_[p].Upload(weights_[p].data());
      on_device_[p] = true;
    }
    return;
  }
  if (!host_sync_) return;
  for (int p : params) device_weights_[p].Upload(weights_[p].data());
}

void Model::ReleaseWeights(const std::vector<int>& params) {
  if (!windowed_) return;
  for (int p : params) {
    device_weights_[p].Release();
    on_device_[p] = false;
  }
}

void Model::AllocGrads(const std::vector<int>& params) {
  if (!windowed_) return;
  for (int p : params) device_grads_[p].Resize(params_[p].numel);
}

void Model::Ready(const std::vector<int>& params) {
  if (windowed_) {
    // The gradients leave the device now, and their room with them.
    for (int p : params) {
      if (device_grads_[p].data() == nullptr) continue;  // no room: the error stands
      backend_->DownloadAsync(device_grads_[p].data(), device_grads_[p].size() * 4,
                              mutable_grads()[p].data());
    }
    backend_->WaitFor(backend_->Fence());
    for (int p : params) device_grads_[p].Release();
    if (grads_ready_ && backend_->error().empty()) grads_ready_(params);
    return;
  }
  if (!host_sync_ || !grads_ready_) return;
  for (int p : params)
    backend_->DownloadAsync(device_grads_[p].data(), device_grads_[p].size() * 4,
                            mutable_grads()[p].data());
  pending_grads_.emplace_back(backend_->Fence(), params);
  // Report what has landed already, without waiting: the host may be
  // behind the device (a copy into memory that is not pinned waits).
  ReportLanded(/*wait=*/false);
}

void Model::ReportLanded(bool wait) {
  size_t done = 0;
  for (; done < pending_grads_.size(); ++done) {
    const auto& [fence, params] = pending_grads_[done];
    if (wait) {
      backend_->WaitFor(fence);
    } else if (!backend_->Reached(fence)) {
      break;
    }
    if (!backend_->error().empty()) {
      done = pending_grads_.size();
      break;
    }
    grads_ready_(params);
  }
  pending_grads_.erase(pending_grads_.begin(), pending_grads_.begin() + done);
}

void Model::FinishGrads() {
  if (windowed_) return;  // each unit's went in Ready
  if (!host_sync_) {
    // The step still ends when the device has done its work.
    backend_->WaitFor(backend_->Fence());
    return;
  }
  if (!grads_ready_) {
    for (size_t p = 0; p < params_.size(); ++p) {
      backend_->DownloadAsync(device_grads_[p].data(), device_grads_[p].size() * 4,
                              mutable_grads()[p].data());
    }
    backend_->WaitFor(backend_->Fence());
    return;
  }
  ReportLanded(/*wait=*/true);
}

absl::StatusOr<StepResult> Model::TrainStep(const Batch& batch) {
  weights_status_ = absl::OkStatus();
  ASSIGN_OR_RETURN(const StepResult r, Forward(0, batch, nullptr, nullptr, /*train=*/true));
  // Every weight is in before any gradient leaves (a BSP push of this clock
  // must not overtake its own read), and none leaves when some never landed.
  if (weights_status_.ok()) (void)AwaitAllWeights();
  RETURN_IF_ERROR(std::exchange(weights_status_, absl::OkStatus()));
  RETURN_IF_ERROR(Backward(0, nullptr, nullptr));
  return r;
}

absl::StatusOr<StepResult> Model::Evaluate(const Batch& batch) {
  return Forward(0, batch, nullptr, nullptr, /*train=*/false);
}

absl::Status Model::CheckSize(const std::vector<float>* v, int64_t rows, int64_t width,
                              const char* what) {
  const int64_t want = rows * width;
  if (v != nullptr && static_cast<int64_t>(v->size()) == want) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", v == nullptr ? 0 : v->size(),
                                                 " floats for ", rows, " rows of ", width));
}

std::unique_ptr<Model> MakeStageModel(const ModelSpec& spec, const Stage& stage,
                                      kernels::Backend* backend, bool recompute,
                                      const GptMemoryPlan* plan) {
  if (spec.kind() == GPT) {
    return std::make_unique<GptModel>(spec, stage, backend, recompute, plan);
  }
  return std::make_unique<MlpModel>(spec, stage, backend);
}

std::unique_ptr<Model> MakeModel(const ModelSpec& spec, kernels::Backend* backend, bool recompute) {
  return MakeStageModel(spec, WholeModel(spec), backend, recompute);
}

Batch SliceBatch(const Batch& batch, int begin, int end) {
  Batch out;
  out.rows = end - begin;
  if (batch.rows == 0) return out;
  auto slice = [&](const auto& v, auto* dst) {
    const size_t width = v.size() / batch.rows;
    dst->assign(v.begin() + begin * width, v.begin() + end * width);
  };
  slice(batch.x, &out.x);
  slice(batch.tokens, &out.tokens);
  slice(batch.labels, &out.labels);
  return out;
}

absl::Status Model::BackendStatus() const {
  const std::string error = backend_->error();
  if (error.empty()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(backend_->name(), " backend: ", error));
}

MlpModel::MlpModel(const ModelSpec& model, const Stage& stage, kernels::Backend* backend)
    : Model(model, stage, backend), delta_(backend), delta_prev_(backend) {
  int width = model.input_dim();
  int param = 0;  // in ModelParams()
  for (int i = 0; i < model.layers_size(); ++i) {
    const LayerSpec& spec = model.layers(i);
    Layer layer;
    layer.type = spec.type();
    layer.in = width;
    layer.out = spec.type() == DENSE ? spec.units() : width;
    if (spec.type() == DENSE) {
      layer.param = param - stage.first_param;
      param += 2;
    }
    width = layer.out;
    if (i >= stage.first_layer && i < stage.end_layer) layers_.push_back(layer);
  }
  input_width_ = layers_.front().in;
  output_width_ = layers_.back().out;
}

MlpModel::Stash& MlpModel::StashAt(int stash) {
  while (static_cast<int>(stashes_.size()) <= stash) {
    stashes_.emplace_back(backend_);
    for (size_t i = 0; i < layers_.size(); ++i) stashes_.back().acts.emplace_back(backend_);
  }
  return stashes_[stash];
}

bool MlpModel::Reserve(Stash& s, int rows) {
  bool room = s.input.Resize(static_cast<int64_t>(rows) * input_width_) && s.labels.Resize(rows);
  int64_t widest = 0;
  for (size_t i = 0; i < layers_.size(); ++i) {
    widest = std::max<int64_t>(widest, std::max(layers_[i].in, layers_[i].out));
    if (layers_[i].type != SOFTMAX_XENT) {
      room = room && s.acts[i].Resize(static_cast<int64_t>(rows) * layers_[i].out);
    }
  }
  // The loss's gradient becomes a spare buffer of the backward's walk down.
  if (last_) room = room && s.dloss.Resize(rows * widest);
  return room && delta_.Resize(rows * widest) && delta_prev_.Resize(rows * widest);
}

float* MlpModel::Output(Stash& s, int i) {
  while (i >= 0 && layers_[i].type == SOFTMAX_XENT) --i;
  return i < 0 ? s.input.data() : s.acts[i].data();
}

absl::StatusOr<StepResult> MlpModel::Forward(int stash, const Batch& batch,
                                             const std::vector<float>* input,
                                             std::vector<float>* output, bool train) {
  const int rows = batch.rows;
  if (!first_) RETURN_IF_ERROR(CheckSize(input, rows, input_width_, "stage input"));
  Stash& s = StashAt(stash);
  s.rows = rows;
  // Sizes first: a device without room fails here, before any work.
  if (!Reserve(s, rows)) return absl::ResourceExhaustedError(BackendStatus().message());
  s.input.Upload(first_ ? batch.x.data() : input->data());
  if (last_) s.labels.Upload(batch.labels.data());
  const float* in = s.input.data();
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    float* out = Output(s, static_cast<int>(i));
    if (l.type == DENSE) {
      UploadWeights({l.param, l.param + 1});
      backend_->Gemm(false, false, rows, l.out, l.in, 1.0f, in, device_weights_[l.param].data(),
                     0.0f, out);
      backend_->AddBias(rows, l.out, device_weights_[l.param + 1].data(), out);
    } else if (l.type == RELU) {
      backend_->ReluForward(static_cast<int64_t>(rows) * l.out, in, out);
    }
    in = out;
  }
  StepResult result;
  if (!last_) {
    output->resize(static_cast<size_t>(rows) * output_width_);
    s.acts.back().Download(output->data());
  } else {
    int correct = 0;
    result.loss = backend_->SoftmaxXent(rows, output_width_, in, s.labels.data(),
                                        train ? s.dloss.data() : nullptr, &correct);
    result.correct = correct;
    result.predicted = rows;
    if (train && loss_scale_ != 1.0f) {
      backend_->Scale(static_cast<int64_t>(rows) * output_width_, loss_scale_, s.dloss.data());
    }
  }
  RETURN_IF_ERROR(BackendStatus());
  return result;
}

absl::Status MlpModel::Backward(int stash, const std::vector<float>* grad_output,
                                std::vector<float>* grad_input) {
  Stash& s = stashes_.at(stash);
  const int rows = s.rows;
  // `delta` holds d(loss)/d(output of layer i) walking down.
  Array* delta = &s.dloss;
  Array* spare = &delta_prev_;
  if (!last_) {
    RETURN_IF_ERROR(CheckSize(grad_output, rows, output_width_, "stage output gradient"));
    backend_->Upload(grad_output->data(), grad_output->size() * sizeof(float), delta_.data());
    delta = &delta_;
  }
  for (int i = static_cast<int>(layers_.size()) - 1; i >= 0; --i) {
    const Layer& l = layers_[i];
    const float* layer_in = i == 0 ? s.input.data() : Output(s, i - 1);
    if (l.type == DENSE) {
      // dW [in, out] = in^T [in, rows] * delta [rows, out]
      backend_->Gemm(true, false, l.in, l.out, rows, 1.0f, layer_in, delta->data(), 0.0f,
                     device_grads_[l.param].data());
      backend_->BiasGrad(rows, l.out, delta->data(), device_grads_[l.param + 1].data());
      Ready({l.param, l.param + 1});
      if (i > 0 || !first_) {
        // d(in) [rows, in] = delta [rows, out] * W^T
        backend_->Gemm(false, true, rows, l.in, l.out, 1.0f, delta->data(),
                       device_weights_[l.param].data(), 0.0f, spare->data());
        std::swap(delta, spare);
      }
    } else if (l.type == RELU) {
      backend_->ReluBackward(static_cast<int64_t>(rows) * l.out, Output(s, i), delta->data(),
                             delta->data());
    }
  }
  if (!first_) {
    grad_input->resize(static_cast<size_t>(rows) * input_width_);
    backend_->Download(delta->data(), grad_input->size() * sizeof(float), grad_input->data());
  }
  FinishGrads();
  return BackendStatus();
}

}  // namespace pstrain
