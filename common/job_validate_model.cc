#include "common/job_validate_model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/job_sizes.h"
#include "common/param_specs.h"
#include "common/params.h"

namespace pstrain {
namespace {

// A GPT: its sizes, on TEXT data (which has no epochs: clocks are needed).
absl::Status ValidateGpt(const JobSpec& job) {
  auto bad = [](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat("job spec: ", parts...));
  };
  const ModelSpec& model = job.model();
  if (model.kind() != GPT) return bad("a TEXT data set needs model.kind: GPT");
  if (job.data().dataset() != TEXT) return bad("model.kind GPT needs data.dataset: TEXT");
  if (model.layers_size() > 0) {
    return bad("model.layers describe an MLP; a GPT is described by model.gpt");
  }
  const GptSpec& gpt = model.gpt();
  if (gpt.layers() < 1 || gpt.layers() > 128) {
    return bad("gpt.layers must be in [1, 128], got ", gpt.layers());
  }
  if (gpt.heads() < 1) return bad("gpt.heads must be >= 1, got ", gpt.heads());
  if (gpt.width() < 1 || gpt.width() > 65536) {
    return bad("gpt.width must be in [1, 65536], got ", gpt.width());
  }
  if (gpt.width() % gpt.heads() != 0) {
    return bad("gpt.width (", gpt.width(), ") must be a multiple of gpt.heads (", gpt.heads(), ")");
  }
  if (gpt.context() < 2 || gpt.context() > 8192) {
    return bad("gpt.context must be in [2, 8192], got ", gpt.context());
  }
  if (job.clocks() < 1) return bad("a TEXT job needs clocks (its data has no epochs)");
  const double f = job.data().validation_fraction();
  if (!(f > 0 && f < 1)) return bad("data.validation_fraction must be in (0, 1), got ", f);
  return absl::OkStatus();
}

// The MLP: dense layers chain, the loss comes last and matches the classes.
absl::Status ValidateMlp(const JobSpec& job) {
  auto bad = [](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat("job spec: ", parts...));
  };
  const DataSpec& data = job.data();
  const ModelSpec& model = job.model();
  if (model.input_dim() < 1) return bad("model.input_dim must be >= 1");
  const int expected_dim = data.dataset() == SYNTHETIC ? data.synthetic_dim() : kFashionMnistDim;
  if (model.input_dim() != expected_dim) {
    return bad("model.input_dim is ", model.input_dim(), " but the data has ", expected_dim,
               " features");
  }
  int width = model.input_dim();
  bool has_dense = false;
  for (int i = 0; i < model.layers_size(); ++i) {
    const LayerSpec& layer = model.layers(i);
    const bool last = i + 1 == model.layers_size();
    switch (layer.type()) {
      case DENSE:
        if (layer.units() < 1) return bad("layer ", i, " (dense): units must be >= 1");
        width = layer.units();
        has_dense = true;
        break;
      case RELU:
        break;
      case SOFTMAX_XENT:
        if (!last) return bad("layer ", i, ": softmax_xent must be the last layer");
        break;
      default:
        return bad("layer ", i, ": unknown layer type");
    }
  }
  if (!has_dense || model.layers(model.layers_size() - 1).type() != SOFTMAX_XENT) {
    return bad("model needs at least one dense layer and softmax_xent last");
  }
  const int classes = data.dataset() == SYNTHETIC ? data.synthetic_classes() : 10;
  if (width != classes) {
    return bad("the last dense layer has ", width, " units but the data has ", classes, " classes");
  }
  return absl::OkStatus();
}

// An EXTERNAL model (common/external_model.h): the workers' own, with
// their own data; its parameters, once declared, valid.
absl::Status ValidateExternal(const JobSpec& job) {
  auto bad = [](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat("job spec: ", parts...));
  };
  const ModelSpec& model = job.model();
  if (model.kind() != EXTERNAL) return bad("data.dataset EXTERNAL_DATA needs model.kind: EXTERNAL");
  if (job.data().dataset() != EXTERNAL_DATA) {
    return bad(
        "model.kind EXTERNAL reads the workers' own data: data.dataset must be EXTERNAL_DATA");
  }
  if (model.layers_size() > 0 || model.has_gpt() || model.has_input_dim()) {
    return bad("model.kind EXTERNAL is the workers' own model: no layers, gpt or input_dim");
  }
  if (job.data().train_size() < 0) return bad("data.train_size must be >= 0");
  if (job.clocks() == 0 && job.data().train_size() == 0) {
    return bad("an EXTERNAL model needs clocks, or data.train_size for its epochs");
  }
  if (job.pipeline_stages() != 1 || job.micro_batches() != 1) {
    return bad(
        "an EXTERNAL model runs as one stage of one micro-batch (pipeline_stages and "
        "micro_batches 1): its script does its own");
  }
  if (!model.params().empty()) {
    if (const absl::Status st = ValidateParamSpecs(model.params()); !st.ok()) {
      return bad(st.message());
    }
  }
  const bool buffers = std::any_of(model.params().begin(), model.params().end(),
                                   [](const ParamSpec& p) { return p.buffer() != NOT_A_BUFFER; });
  if (buffers && job.optimizer().clip_norm() > 0) {
    return bad("a model with buffers (ParamSpec.buffer) cannot clip (optimizer.clip_norm): "
               "the norm would count the buffers' values");
  }
  return absl::OkStatus();
}

// A chunk_bytes that cuts the model into millions of chunks is a mistake.
absl::Status ValidateChunks(const JobSpec& job) {
  const int64_t per_chunk = job.chunk_bytes() / 4;
  int64_t chunks = 0, params = 0;
  for (const ParamInfo& p : ModelParams(job.model())) {
    chunks += (p.numel + per_chunk - 1) / per_chunk;
    params += p.numel;
  }
  if (chunks > kMaxChunks) {
    return absl::InvalidArgumentError(absl::StrCat("job spec: chunk_bytes ", job.chunk_bytes(),
                                                   " cuts the model's ", params,
                                                   " parameters into ", chunks, " chunks; at most ",
                                                   kMaxChunks, " are allowed (raise chunk_bytes)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateModel(const JobSpec& job) {
  const bool gpt = job.model().kind() == GPT || job.data().dataset() == TEXT;
  const bool external = job.model().kind() == EXTERNAL || job.data().dataset() == EXTERNAL_DATA;
  const absl::Status model_ok = external ? ValidateExternal(job)
                                : gpt    ? ValidateGpt(job)
                                         : ValidateMlp(job);
  if (!model_ok.ok()) return model_ok;
  return ValidateChunks(job);
}

}  // namespace pstrain
