#include "common/job_spec.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string_view>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/external_model.h"
#include "common/job_sizes.h"
#include "common/params.h"
#include "common/stage_plan.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace pstrain {
namespace {

constexpr char kFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";
constexpr int64_t kFashionMnistTrain = 60000;
constexpr int kFashionMnistDim = 784;
constexpr char kTextDir[] = "/usr/share/games/fortunes";

// Fields renamed (issue 25: the spec's clock counts say clocks, a step
// being one optimizer update): a job file with an old name is refused
// naming the new one.
constexpr struct {
  absl::string_view old_name;
  absl::string_view new_name;
} kRenamedFields[] = {
    {"steps", "clocks"}, {"warmup_steps", "warmup_clocks"}, {"decay_steps", "decay_clocks"}};

// The parser's message, or what to write instead when it is about a
// renamed field.
std::string Explained(const std::string& message) {
  for (const auto& r : kRenamedFields) {
    if (absl::StrContains(message, absl::StrCat("has no field named \"", r.old_name, "\""))) {
      return absl::StrCat("field \"", r.old_name, "\" is now \"", r.new_name, "\"");
    }
  }
  return message;
}

// Keeps the first parse error with its position.
class FirstErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  explicit FirstErrorCollector(std::string file) : file_(std::move(file)) {}
  void AddError(int line, int column, const std::string& message) override {
    if (error_.empty()) {
      // The parser counts from 0; editors count from 1.
      error_ = absl::StrCat(file_, ":", line + 1, ":", column + 1, ": ", Explained(message));
    }
  }
  const std::string& error() const { return error_; }

 private:
  std::string file_;
  std::string error_;
};

}  // namespace

absl::StatusOr<JobSpec> ParseJobSpecText(const std::string& text, const std::string& file_name) {
  JobSpec job;
  FirstErrorCollector errors(file_name);
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &job)) {
    return absl::InvalidArgumentError(errors.error().empty()
                                          ? absl::StrCat(file_name, ": cannot parse job spec")
                                          : errors.error());
  }
  return job;
}

absl::StatusOr<JobSpec> LoadJobSpec(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open job spec"));
  }
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return absl::DataLossError(absl::StrCat(path, ": cannot read job spec"));
  }
  return ParseJobSpecText(text.str(), path);
}

namespace {

void ApplyOptimizerDefaults(OptimizerSpec* opt) {
  if (opt->type() == OPTIMIZER_UNSPECIFIED) opt->set_type(ADAM);
  const OptimizerType type = opt->type();
  if (!opt->has_learning_rate()) {
    switch (type) {
      case ADAM:
      case ADAMW:
      case RMSPROP:
      case ADAFACTOR:
        opt->set_learning_rate(1e-3f);
        break;
      case ADADELTA:
        opt->set_learning_rate(1.0f);
        break;
      case LION:  // its steps are sign-sized: a tenth of AdamW's lr (the paper's advice)
        opt->set_learning_rate(1e-4f);
        break;
      default:
        opt->set_learning_rate(0.01f);
        break;
    }
  }
  if ((type == MOMENTUM || type == NESTEROV) && !opt->has_momentum()) opt->set_momentum(0.9f);
  if (!opt->has_beta1()) opt->set_beta1(0.9f);
  if (!opt->has_beta2()) opt->set_beta2(type == LION ? 0.99f : 0.999f);
  if (!opt->has_epsilon()) {
    switch (type) {
      case ADAGRAD:
        opt->set_epsilon(1e-10f);
        break;
      case ADADELTA:
        opt->set_epsilon(1e-6f);
        break;
      case ADAFACTOR:
        opt->set_epsilon(1e-30f);
        break;
      default:
        opt->set_epsilon(1e-8f);
        break;
    }
  }
  if (!opt->has_rho()) opt->set_rho(0.9f);
  if (!opt->has_decay_rate()) opt->set_decay_rate(-0.8f);
  if (!opt->has_clip_threshold()) opt->set_clip_threshold(1.0f);
  LrSchedule* sched = opt->mutable_schedule();
  if (sched->type() == SCHEDULE_UNSPECIFIED) sched->set_type(CONSTANT);
  if (sched->type() == STEP_DECAY && !sched->has_gamma()) sched->set_gamma(0.1f);
}

absl::Status ValidateOptimizer(const OptimizerSpec& opt) {
  auto bad = [](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat("job spec: optimizer.", parts...));
  };
  if (!OptimizerType_IsValid(opt.type())) return bad("type ", opt.type(), " is unknown");
  if (!(opt.learning_rate() > 0)) return bad("learning_rate must be > 0");
  if (opt.momentum() < 0 || opt.momentum() >= 1) return bad("momentum must be in [0, 1)");
  if (opt.beta1() < 0 || opt.beta1() >= 1 || opt.beta2() < 0 || opt.beta2() >= 1) {
    return bad("beta1 and beta2 must be in [0, 1)");
  }
  if (!(opt.epsilon() > 0)) return bad("epsilon must be > 0");
  if (!(opt.rho() > 0 && opt.rho() < 1)) return bad("rho must be in (0, 1)");
  if (!(opt.weight_decay() >= 0)) return bad("weight_decay must be >= 0");
  if (!(opt.clip_norm() >= 0)) return bad("clip_norm must be >= 0");
  if (!(opt.decay_rate() < 0)) return bad("decay_rate must be < 0");
  if (!(opt.clip_threshold() > 0)) return bad("clip_threshold must be > 0");
  const LrSchedule& sched = opt.schedule();
  switch (sched.type()) {
    case CONSTANT:
      break;
    case WARMUP_COSINE:
      if (sched.warmup_clocks() < 0 || sched.decay_clocks() < 0) {
        return bad("schedule.warmup_clocks and decay_clocks must be >= 0");
      }
      if (!(sched.min_lr() >= 0 && sched.min_lr() <= opt.learning_rate())) {
        return bad("schedule.min_lr must be in [0, learning_rate]");
      }
      break;
    case STEP_DECAY:
      if (sched.step_size() < 1) return bad("schedule.step_size must be >= 1 for STEP_DECAY");
      if (!(sched.gamma() > 0 && sched.gamma() <= 1))
        return bad("schedule.gamma must be in (0, 1]");
      break;
    default:
      return bad("schedule.type ", sched.type(), " is unknown");
  }
  return absl::OkStatus();
}

// The GPT half of ValidateJobSpec.
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

}  // namespace

void ApplyJobDefaults(JobSpec* job) {
  DataSpec* data = job->mutable_data();
  ModelSpec* model = job->mutable_model();
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
  if (model->kind() == GPT) {
    GptSpec* gpt = model->mutable_gpt();
    if (!gpt->has_layers()) gpt->set_layers(2);
    if (!gpt->has_heads()) gpt->set_heads(4);
    if (!gpt->has_width()) gpt->set_width(128);
    if (!gpt->has_context()) gpt->set_context(64);
  }
  if (model->kind() == MLP && !model->has_input_dim()) {
    model->set_input_dim(data->dataset() == SYNTHETIC ? data->synthetic_dim() : kFashionMnistDim);
  }
  if (model->kind() == MLP && model->layers_size() == 0) {
    // The default model: 784-256-256-10 MLP with ReLU.
    const int classes = data->dataset() == SYNTHETIC ? data->synthetic_classes() : 10;
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
}

namespace {

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
    return bad("model.kind EXTERNAL reads the workers' own data: data.dataset must be EXTERNAL_DATA");
  }
  if (model.layers_size() > 0 || model.has_gpt() || model.has_input_dim()) {
    return bad("model.kind EXTERNAL is the workers' own model: no layers, gpt or input_dim");
  }
  if (job.data().train_size() < 0) return bad("data.train_size must be >= 0");
  if (job.clocks() == 0 && job.data().train_size() == 0) {
    return bad("an EXTERNAL model needs clocks, or data.train_size for its epochs");
  }
  if (job.pipeline_stages() != 1 || job.micro_batches() != 1) {
    return bad("an EXTERNAL model runs as one stage of one micro-batch (pipeline_stages and "
               "micro_batches 1): its script does its own");
  }
  if (!model.params().empty()) {
    if (const absl::Status st = ValidateParamSpecs(model.params()); !st.ok()) {
      return bad(st.message());
    }
  }
  return absl::OkStatus();
}

// Stages, replicas, their shares of the batch and its micro-batches.
// The tables: names, widths, and optimizers that have a row-wise form.
absl::Status ValidateTables(const JobSpec& job) {
  if (!Consistency_IsValid(job.table_consistency())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job spec: table_consistency ", job.table_consistency(), " is unknown (BSP, SSP or ASP)"));
  }
  if (job.tables_size() > 0 && job.pipeline_stages() > 1) {
    return absl::InvalidArgumentError(
        "job spec: sparse tables with pipeline_stages > 1 are not supported yet (every worker "
        "takes part in a table's rounds)");
  }
  absl::flat_hash_set<std::string> names;
  for (const TableSpec& t : job.tables()) {
    auto bad = [&t](auto&&... parts) {
      return absl::InvalidArgumentError(
          absl::StrCat("job spec: table '", t.name(), "': ", parts...));
    };
    if (t.name().empty() || t.name().size() > 64 ||
        t.name().find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                   "0123456789_.-") != std::string::npos) {
      return bad("a name is 1 to 64 of [A-Za-z0-9_.-]");
    }
    if (!names.insert(t.name()).second) return bad("declared twice");
    if (t.width() < 1 || t.width() > 65536) {
      return bad("width must be in [1, 65536], got ", t.width());
    }
    if (t.memory_budget_bytes() < 0) return bad("memory_budget_bytes must be >= 0");
    if (t.admit_after() < 0 || t.admit_after() > 255) {
      return bad("admit_after must be in [0, 255], got ", t.admit_after());
    }
    if (t.expire_after_clocks() < 0) {
      return bad("expire_after_clocks must be >= 0, got ", t.expire_after_clocks());
    }
    if (!(t.init_scale() >= 0 && std::isfinite(t.init_scale()))) {
      return bad("init_scale must be finite and >= 0");
    }
    const OptimizerSpec& opt = t.optimizer();
    if (opt.type() != SGD && opt.type() != ADAGRAD && opt.type() != ADAM) {
      return bad("optimizer.type must be SGD, ADAGRAD or ADAM, got ",
                 OptimizerType_Name(opt.type()));
    }
    if (opt.weight_decay() != 0 || opt.clip_norm() != 0 || opt.schedule().type() != CONSTANT) {
      return bad("a table's optimizer takes no weight_decay, clip_norm or schedule");
    }
    if (opt.allow_nonfinite()) {
      return bad("a table's optimizer takes no allow_nonfinite: the job's "
                 "optimizer.allow_nonfinite covers the tables too (one rule for every gradient)");
    }
    if (const absl::Status st = ValidateOptimizer(opt); !st.ok()) {
      return bad(st.message().substr(std::string_view("job spec: ").size()));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateReplicas(const JobSpec& job) {
  auto bad = [](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat("job spec: ", parts...));
  };
  const int stages = job.pipeline_stages();
  if (const auto plan = PlanStages(job.model(), stages); !plan.ok()) return plan.status();
  if (job.num_workers() % stages != 0) {
    return bad("num_workers (", job.num_workers(), ") must be a multiple of pipeline_stages (",
               stages, "): replicas x stages");
  }
  if (job.pipeline_schedule() != GPIPE && job.pipeline_schedule() != ONE_F_ONE_B) {
    return bad("pipeline_schedule ", job.pipeline_schedule(), " is unknown (GPIPE or ONE_F_ONE_B)");
  }
  const int replicas = job.num_workers() / stages;
  const char* who = stages > 1 ? "replicas" : "num_workers";
  if (job.batch_size() < replicas) {
    return bad("batch_size (", job.batch_size(), ") must be at least ", who, " (", replicas, ")");
  }
  const int share = job.batch_size() / replicas;
  if (job.micro_batches() < 1 || job.micro_batches() > share) {
    return bad("micro_batches must be in [1, batch_size / ", who, " = ", share, "], got ",
               job.micro_batches());
  }
  if (stages > 1 && (job.batch_size() % replicas != 0 || share % job.micro_batches() != 0)) {
    return bad("with pipeline stages, micro_batches (", job.micro_batches(),
               ") must divide each replica's share of the batch: batch_size (", job.batch_size(),
               ") / replicas (", replicas, ")");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateJobSpec(const JobSpec& job) {
  auto bad = [](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat("job spec: ", parts...));
  };
  if (job.num_servers() < 1 || job.num_servers() > 1024) {
    return bad("num_servers must be in [1, 1024], got ", job.num_servers());
  }
  if (job.num_workers() < 1 || job.num_workers() > 1024) {
    return bad("num_workers must be in [1, 1024], got ", job.num_workers());
  }
  if (job.data().dataset() == SYNTHETIC &&
      (job.data().synthetic_train_size() < 1 || job.data().synthetic_test_size() < 1 ||
       job.data().synthetic_dim() < 1 || job.data().synthetic_classes() < 2)) {
    return bad("synthetic data needs positive sizes and at least 2 classes");
  }
  const bool size_known = job.data().dataset() != EXTERNAL_DATA || job.data().train_size() > 0;
  if (size_known && job.batch_size() > TrainSetSize(job)) {
    return bad("batch_size (", job.batch_size(), ") exceeds the training set (", TrainSetSize(job),
               ")");
  }
  if (job.staleness() < 0) return bad("staleness must be >= 0");
  if (job.checkpoint_every() < 0) {
    return bad("checkpoint_every must be >= 0, got ", job.checkpoint_every());
  }
  if (job.checkpoint_every() > 0 && job.checkpoint_dir().empty()) {
    return bad("checkpoint_every needs a checkpoint_dir");
  }
  if (job.consistency() == BSP && job.staleness() != 0 && job.table_consistency() != SSP) {
    return bad("staleness must be 0 under BSP (use consistency: SSP)");
  }
  if (job.epochs() < 0 || job.clocks() < 0) return bad("epochs and clocks must be >= 0");
  if (job.clocks() == 0 && job.epochs() < 1) return bad("epochs must be >= 1 when clocks is 0");
  if (job.log_every() < 1) return bad("log_every must be >= 1, got ", job.log_every());
  if (job.chunk_bytes() < 4 || job.chunk_bytes() % 4 != 0 || job.chunk_bytes() > (64 << 20)) {
    return bad("chunk_bytes must be a multiple of 4 in [4, 64 MiB], got ", job.chunk_bytes());
  }
  if (const absl::Status st = ValidateOptimizer(job.optimizer()); !st.ok()) return st;
  if (!DType_IsValid(job.wire_dtype())) return bad("wire_dtype ", job.wire_dtype(), " is unknown");
  const bool gpt = job.model().kind() == GPT || job.data().dataset() == TEXT;
  const bool external = job.model().kind() == EXTERNAL || job.data().dataset() == EXTERNAL_DATA;
  const absl::Status model_ok = external ? ValidateExternal(job)
                                : gpt     ? ValidateGpt(job)
                                          : ValidateMlp(job);
  if (!model_ok.ok()) return model_ok;
  // Every chunk is a server's unit of storage, locking and transfer: a
  // chunk_bytes that cuts the model into millions of them is a mistake.
  constexpr int64_t kMaxChunks = int64_t{1} << 20;
  const int64_t per_chunk = job.chunk_bytes() / 4;
  int64_t chunks = 0, params = 0;
  for (const ParamInfo& p : ModelParams(job.model())) {
    chunks += (p.numel + per_chunk - 1) / per_chunk;
    params += p.numel;
  }
  if (chunks > kMaxChunks) {
    return bad("chunk_bytes ", job.chunk_bytes(), " cuts the model's ", params,
               " parameters into ", chunks, " chunks; at most ", kMaxChunks,
               " are allowed (raise chunk_bytes)");
  }
  if (const absl::Status st = ValidateReplicas(job); !st.ok()) return st;
  if (const absl::Status st = ValidateTables(job); !st.ok()) return st;
  return ValidateJobSizes(job);
}

int64_t TrainSetSize(const JobSpec& job) {
  switch (job.data().dataset()) {
    case SYNTHETIC:
      return job.data().synthetic_train_size();
    case EXTERNAL_DATA:  // the workers' own: the first worker's count (0 before)
      return job.data().train_size();
    case TEXT:  // windows drawn at random: as many as the job uses
      return SaturatingMul(std::max<int64_t>(1, job.clocks()), std::max(1, job.batch_size()));
    default:
      return kFashionMnistTrain;
  }
}

int64_t ClocksPerEpoch(const JobSpec& job) {
  return std::max<int64_t>(1, TrainSetSize(job) / std::max(1, job.batch_size()));
}

int64_t TotalClocks(const JobSpec& job) {
  if (job.clocks() > 0) return job.clocks();
  return static_cast<int64_t>(job.epochs()) * ClocksPerEpoch(job);
}

int64_t EffectiveStaleness(const JobSpec& job) {
  switch (job.consistency()) {
    case ASP:
      return -1;
    case SSP:
      return job.staleness();
    default:
      return 0;
  }
}

int64_t MinClockForRead(const JobSpec& job, int64_t clock) {
  const int64_t s = EffectiveStaleness(job);
  if (s < 0) return 0;
  return std::max<int64_t>(0, clock - s);
}

Consistency TableConsistency(const JobSpec& job) {
  const Consistency c = job.table_consistency();
  if (c != CONSISTENCY_UNSPECIFIED) return c;
  return job.consistency() == CONSISTENCY_UNSPECIFIED ? BSP : job.consistency();
}

int64_t TableMinClockForRead(const JobSpec& job, int64_t clock) {
  switch (TableConsistency(job)) {
    case ASP:
      return 0;
    case SSP:
      return std::max<int64_t>(0, clock - job.staleness());
    default:
      return std::max<int64_t>(0, clock);
  }
}

ConsistencySchedule::ConsistencySchedule(const JobSpec& job) {
  base_.set_consistency(job.consistency());
  base_.set_staleness(job.staleness());
}

const ConsistencyChange* ConsistencySchedule::At(int64_t clock) const {
  const ConsistencyChange* in_force = nullptr;
  for (const ConsistencyChange& c : changes_) {
    if (c.clock() <= clock) in_force = &c;
  }
  return in_force;
}

Consistency ConsistencySchedule::ConsistencyAt(int64_t clock) const {
  const ConsistencyChange* c = At(clock);
  return c == nullptr ? base_.consistency() : c->consistency();
}

int64_t ConsistencySchedule::StalenessAt(int64_t clock) const {
  const ConsistencyChange* c = At(clock);
  if (c == nullptr) c = &base_;
  return c->consistency() == ASP ? -1 : c->consistency() == SSP ? c->staleness() : 0;
}

int64_t ConsistencySchedule::MinClockForRead(int64_t clock) const {
  const int64_t s = StalenessAt(clock);
  return s < 0 ? 0 : std::max<int64_t>(0, clock - s);
}

ConsistencyChange ConsistencySchedule::Latest() const {
  return changes_.empty() ? base_ : changes_.back();
}

}  // namespace pstrain
