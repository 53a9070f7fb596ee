#include "worker/models/model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "worker/models/gpt_model.h"

namespace pstrain {

Model::Model(const ModelSpec& spec, kernels::Backend* backend)
    : backend_(backend), params_(ModelParams(spec)) {
  for (const ParamInfo& p : params_) {
    weights_.push_back(kernels::PinnableVector(p.numel));
    grads_.push_back(kernels::PinnableVector(p.numel));
    device_weights_.emplace_back(backend, p.numel);
    device_grads_.emplace_back(backend, p.numel);
  }
  for (auto* host : {&weights_, &grads_}) {
    for (std::vector<float>& v : *host) {
      const int64_t bytes = static_cast<int64_t>(v.size() * sizeof(float));
      if (backend_->PinHost(v.data(), bytes)) pinned_bytes_ += bytes;
    }
  }
}

Model::~Model() {
  for (auto* host : {&weights_, &grads_}) {
    for (std::vector<float>& v : *host) backend_->UnpinHost(v.data());
  }
}

void Model::UploadWeights(const std::vector<int>& params) {
  if (!host_sync_) return;
  for (int p : params) device_weights_[p].Upload(weights_[p].data());
}

void Model::Ready(const std::vector<int>& params) {
  if (!host_sync_ || !grads_ready_) return;
  for (int p : params) backend_->DownloadAsync(device_grads_[p].data(),
                                               device_grads_[p].size() * 4, grads_[p].data());
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
  if (!host_sync_) {
    // The step still ends when the device has done its work.
    backend_->WaitFor(backend_->Fence());
    return;
  }
  if (!grads_ready_) {
    for (size_t p = 0; p < params_.size(); ++p) {
      backend_->DownloadAsync(device_grads_[p].data(), device_grads_[p].size() * 4,
                              grads_[p].data());
    }
    backend_->WaitFor(backend_->Fence());
    return;
  }
  ReportLanded(/*wait=*/true);
}

std::unique_ptr<Model> MakeModel(const ModelSpec& spec, kernels::Backend* backend,
                                 bool recompute) {
  if (spec.kind() == GPT) return std::make_unique<GptModel>(spec, backend, recompute);
  return std::make_unique<MlpModel>(spec, backend);
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

MlpModel::MlpModel(const ModelSpec& model, kernels::Backend* backend)
    : Model(model, backend), input_(backend), delta_(backend), delta_prev_(backend),
      labels_(backend) {
  int width = model.input_dim();
  int param = 0;
  for (const LayerSpec& spec : model.layers()) {
    Layer layer;
    layer.type = spec.type();
    layer.in = width;
    if (spec.type() == DENSE) {
      layer.out = spec.units();
      layer.param = param;
      param += 2;
    } else {
      layer.out = width;
    }
    width = layer.out;
    layers_.push_back(layer);
    acts_.emplace_back(backend);
  }
}

absl::Status Model::BackendStatus() const {
  const std::string error = backend_->error();
  if (error.empty()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(backend_->name(), " backend: ", error));
}

absl::StatusOr<StepResult> MlpModel::Run(const Batch& batch, bool backward) {
  const int rows = batch.rows;
  const size_t n = layers_.size();
  // Sizes first: a device without room fails here, before any work.
  bool room = input_.Resize(static_cast<int64_t>(rows) * layers_[0].in) && labels_.Resize(rows);
  int64_t widest = 0;
  for (size_t i = 0; i < n; ++i) {
    widest = std::max<int64_t>(widest, std::max(layers_[i].in, layers_[i].out));
    if (layers_[i].type != SOFTMAX_XENT) {
      room = room && acts_[i].Resize(static_cast<int64_t>(rows) * layers_[i].out);
    }
  }
  room = room && delta_.Resize(rows * widest) && delta_prev_.Resize(rows * widest);
  if (!room) return absl::ResourceExhaustedError(BackendStatus().message());
  input_.Upload(batch.x.data());
  labels_.Upload(batch.labels.data());

  // out[i]: the output of layer i; the loss layer passes its input through.
  std::vector<float*> out(n);
  const float* in = input_.data();
  for (size_t i = 0; i < n; ++i) {
    const Layer& l = layers_[i];
    switch (l.type) {
      case DENSE:
        UploadWeights({l.param, l.param + 1});
        out[i] = acts_[i].data();
        backend_->Gemm(false, false, rows, l.out, l.in, 1.0f, in, device_weights_[l.param].data(),
                       0.0f, out[i]);
        backend_->AddBias(rows, l.out, device_weights_[l.param + 1].data(), out[i]);
        break;
      case RELU:
        out[i] = acts_[i].data();
        backend_->ReluForward(static_cast<int64_t>(rows) * l.out, in, out[i]);
        break;
      default:  // SOFTMAX_XENT
        out[i] = const_cast<float*>(in);
        break;
    }
    in = out[i];
  }
  const int classes = layers_.back().out;
  StepResult result;
  int correct = 0;
  result.loss = backend_->SoftmaxXent(rows, classes, in, labels_.data(),
                                      backward ? delta_.data() : nullptr, &correct);
  result.correct = correct;
  result.predicted = rows;
  if (backward && loss_scale_ != 1.0f) {
    backend_->Scale(static_cast<int64_t>(rows) * classes, loss_scale_, delta_.data());
  }
  if (backward) {
    // delta_ holds d(loss)/d(output of layer i) walking down.
    for (size_t i = n; i-- > 0;) {
      const Layer& l = layers_[i];
      const float* layer_in = i == 0 ? input_.data() : out[i - 1];
      if (l.type == DENSE) {
        // dW [in, out] = in^T [in, rows] * delta [rows, out]
        backend_->Gemm(true, false, l.in, l.out, rows, 1.0f, layer_in, delta_.data(), 0.0f,
                       device_grads_[l.param].data());
        backend_->BiasGrad(rows, l.out, delta_.data(), device_grads_[l.param + 1].data());
        Ready({l.param, l.param + 1});
        if (i > 0) {
          // d(in) [rows, in] = delta [rows, out] * W^T
          backend_->Gemm(false, true, rows, l.in, l.out, 1.0f, delta_.data(),
                         device_weights_[l.param].data(), 0.0f, delta_prev_.data());
          std::swap(delta_, delta_prev_);
        }
      } else if (l.type == RELU) {
        backend_->ReluBackward(static_cast<int64_t>(rows) * l.out, out[i], delta_.data(),
                               delta_.data());
      }
    }
    FinishGrads();
  }
  const absl::Status st = BackendStatus();
  if (!st.ok()) return st;
  return result;
}

}  // namespace pstrain
