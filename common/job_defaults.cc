#include "common/job_defaults.h"

#include "absl/strings/str_cat.h"
#include "common/grad_codec.h"
#include "common/job_optimizer.h"
#include "common/job_sizes.h"

namespace pstrain {
namespace {

constexpr char kFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";
constexpr char kTextDir[] = "/usr/share/games/fortunes";

// The data set and the model kind, each from the other when only one is
// given: GPT reads TEXT, EXTERNAL its EXTERNAL_DATA, an MLP Fashion-MNIST.
void ApplyKindDefaults(DataSpec* data, ModelSpec* model) {
  if (data->dataset() == DATASET_UNSPECIFIED) {
    data->set_dataset(model->kind() == GPT        ? TEXT
                      : model->kind() == EXTERNAL ? EXTERNAL_DATA
                                                  : FASHION_MNIST);
  }
  if (model->kind() == MODEL_KIND_UNSPECIFIED) {
    model->set_kind(data->dataset() == TEXT            ? GPT
                    : data->dataset() == EXTERNAL_DATA ? EXTERNAL
                                                       : MLP);
  }
}

// Where the data set lies and, for the generated ones, its sizes.
// REQUIRES: data->dataset() is set (ApplyKindDefaults).
void ApplyDataDefaults(DataSpec* data) {
  if (data->dataset() == FASHION_MNIST && data->path().empty()) {
    data->set_path(kFashionMnistDir);
  }
  if (data->dataset() == TEXT) {
    if (data->path().empty()) data->set_path(kTextDir);
    if (!data->has_validation_fraction()) data->set_validation_fraction(0.1);
  }
  if (data->dataset() == SYNTHETIC) {
    if (!data->has_synthetic_train_size()) data->set_synthetic_train_size(4096);
    if (!data->has_synthetic_test_size()) data->set_synthetic_test_size(1024);
    if (!data->has_synthetic_dim()) data->set_synthetic_dim(32);
    if (!data->has_synthetic_classes()) data->set_synthetic_classes(4);
  }
}

// Layers without a name get their type's and index's (dense0, relu1, ...).
void NameLayers(ModelSpec* model) {
  for (int i = 0; i < model->layers_size(); ++i) {
    LayerSpec* layer = model->mutable_layers(i);
    if (!layer->name().empty()) continue;
    switch (layer->type()) {
      case DENSE:
        layer->set_name(absl::StrCat("dense", i));
        break;
      case RELU:
        layer->set_name(absl::StrCat("relu", i));
        break;
      case SOFTMAX_XENT:
        layer->set_name(absl::StrCat("xent", i));
        break;
      default:
        layer->set_name(absl::StrCat("layer", i));
        break;
    }
  }
}

// A GPT's sizes, an MLP's input width and (when it has no layers) the
// quick start's layers, then every layer's name.
// REQUIRES: ApplyDataDefaults ran (an MLP's widths follow its data).
void ApplyModelDefaults(const DataSpec& data, ModelSpec* model) {
  if (model->kind() == GPT) {
    GptSpec* gpt = model->mutable_gpt();
    if (!gpt->has_layers()) gpt->set_layers(2);
    if (!gpt->has_heads()) gpt->set_heads(4);
    if (!gpt->has_width()) gpt->set_width(128);
    if (!gpt->has_context()) gpt->set_context(64);
  }
  if (model->kind() == MLP && !model->has_input_dim()) {
    model->set_input_dim(data.dataset() == SYNTHETIC ? data.synthetic_dim() : kFashionMnistDim);
  }
  if (model->kind() == MLP && model->layers_size() == 0) {
    // The default model: 784-256-256-10 MLP with ReLU.
    const int classes = data.dataset() == SYNTHETIC ? data.synthetic_classes() : 10;
    for (int units : {256, 256}) {
      LayerSpec* dense = model->add_layers();
      dense->set_type(DENSE);
      dense->set_units(units);
      model->add_layers()->set_type(RELU);
    }
    LayerSpec* out = model->add_layers();
    out->set_type(DENSE);
    out->set_units(classes);
    model->add_layers()->set_type(SOFTMAX_XENT);
  }
  NameLayers(model);
}

}  // namespace

void ApplyJobDefaults(JobSpec* job) {
  DataSpec* data = job->mutable_data();
  ModelSpec* model = job->mutable_model();
  ApplyKindDefaults(data, model);
  ApplyDataDefaults(data);
  ApplyModelDefaults(*data, model);
  ApplyOptimizerDefaults(job->mutable_optimizer());
  for (TableSpec& table : *job->mutable_tables()) {
    if (!table.has_init_scale() && table.width() > 0) table.set_init_scale(1.0f / table.width());
    ApplyOptimizerDefaults(table.mutable_optimizer());
  }
  if (job->consistency() == CONSISTENCY_UNSPECIFIED) job->set_consistency(BSP);
  if (job->tables_size() > 0 && job->table_consistency() == CONSISTENCY_UNSPECIFIED) {
    job->set_table_consistency(job->consistency());
  }
  if (!job->has_batch_size()) job->set_batch_size(64);
  if (!job->has_epochs()) job->set_epochs(1);
  if (!job->has_chunk_bytes()) job->set_chunk_bytes(1 << 20);
  if (!job->has_num_servers()) job->set_num_servers(1);
  if (!job->has_num_workers()) job->set_num_workers(1);
  if (!job->has_log_every()) job->set_log_every(50);
  if (!job->has_micro_batches()) job->set_micro_batches(1);
  if (!job->has_pipeline_stages()) job->set_pipeline_stages(1);
  if (job->pipeline_schedule() == PIPELINE_SCHEDULE_UNSPECIFIED) {
    job->set_pipeline_schedule(ONE_F_ONE_B);
  }
  if (job->has_compression()) {
    *job->mutable_compression() = WithCompressionDefaults(job->compression());
  }
}

}  // namespace pstrain
