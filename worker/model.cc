#include "worker/model.h"

#include <algorithm>

namespace pstrain {

Model::Model(const ModelSpec& model, kernels::Backend* backend)
    : backend_(backend), params_(ModelParams(model)) {
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
  }
  for (const ParamInfo& p : params_) {
    weights_.emplace_back(p.numel, 0.0f);
    grads_.emplace_back(p.numel, 0.0f);
  }
  acts_.resize(layers_.size() + 1);
}

StepResult Model::TrainStep(const float* x, const int32_t* labels, int rows) {
  return Forward(x, labels, rows, /*backward=*/true);
}

StepResult Model::Evaluate(const float* x, const int32_t* labels, int rows) {
  return Forward(x, labels, rows, /*backward=*/false);
}

StepResult Model::Forward(const float* x, const int32_t* labels, int rows, bool backward) {
  acts_[0].assign(x, x + static_cast<int64_t>(rows) * layers_[0].in);
  StepResult result;
  const size_t n = layers_.size();
  for (size_t i = 0; i < n; ++i) {
    const Layer& l = layers_[i];
    const std::vector<float>& in = acts_[i];
    std::vector<float>& out = acts_[i + 1];
    switch (l.type) {
      case DENSE:
        out.resize(static_cast<int64_t>(rows) * l.out);
        backend_->Gemm(false, false, rows, l.out, l.in, 1.0f, in.data(),
                       weights_[l.param].data(), 0.0f, out.data());
        backend_->AddBias(rows, l.out, weights_[l.param + 1].data(), out.data());
        break;
      case RELU:
        out.resize(in.size());
        backend_->ReluForward(static_cast<int64_t>(in.size()), in.data(), out.data());
        break;
      case SOFTMAX_XENT:
        // The loss layer passes the logits through; the loss is below.
        out = in;
        break;
      default:
        break;
    }
  }
  const int classes = layers_.back().out;
  delta_.resize(static_cast<int64_t>(rows) * classes);
  result.loss = backend_->SoftmaxXent(rows, classes, acts_[n].data(), labels,
                                      backward ? delta_.data() : nullptr, &result.correct);
  if (!backward) return result;

  // delta_ holds d(loss)/d(output of layer i) walking down.
  for (size_t i = n; i-- > 0;) {
    const Layer& l = layers_[i];
    switch (l.type) {
      case DENSE: {
        const std::vector<float>& in = acts_[i];
        // dW [in, out] = in^T [in, rows] * delta [rows, out]
        backend_->Gemm(true, false, l.in, l.out, rows, 1.0f, in.data(), delta_.data(), 0.0f,
                       grads_[l.param].data());
        backend_->BiasGrad(rows, l.out, delta_.data(), grads_[l.param + 1].data());
        if (i > 0) {
          // d(in) [rows, in] = delta [rows, out] * W^T
          delta_prev_.resize(static_cast<int64_t>(rows) * l.in);
          backend_->Gemm(false, true, rows, l.in, l.out, 1.0f, delta_.data(),
                         weights_[l.param].data(), 0.0f, delta_prev_.data());
          std::swap(delta_, delta_prev_);
        }
        break;
      }
      case RELU:
        backend_->ReluBackward(static_cast<int64_t>(delta_.size()), acts_[i + 1].data(),
                               delta_.data(), delta_.data());
        break;
      default:
        break;
    }
  }
  return result;
}

}  // namespace pstrain
