#include "worker/trainer.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/daemon.h"
#include "common/dtype.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/partition.h"
#include "common/process_stats.h"
#include "common/stage_plan.h"
#include "common/status_macros.h"
#include "proto/tensor.pb.h"
#include "worker/models/gpt_model.h"
#include "worker/models/loss_scaler.h"
#include "worker/models/model.h"
#include "worker/param_client.h"
#include "worker/placed_partitions.h"
#include "worker/ps_client.h"
#include "worker/scheduler_gate.h"
#include "worker/standalone/standalone.h"

namespace pstrain {
namespace {

// Sequences of the validation text evaluated at once (GPT).
constexpr int kEvalSeqs = 32;

absl::Status WriteWeights(const std::string& path, int64_t clock, const Model& model,
                          const std::vector<std::vector<float>>& weights) {
  TensorSet set;
  set.set_clock(clock);
  for (size_t i = 0; i < model.params().size(); ++i) {
    NamedTensor* t = set.add_tensors();
    t->set_name(model.params()[i].name);
    for (int64_t d : model.params()[i].shape) t->add_shape(d);
    t->mutable_values()->Add(weights[i].begin(), weights[i].end());
  }
  std::ofstream out(path, std::ios::binary);
  if (!out || !set.SerializeToOstream(&out)) {
    return absl::PermissionDeniedError(absl::StrCat(path, ": cannot write weights"));
  }
  return absl::OkStatus();
}

}  // namespace

Trainer::Trainer(TrainerOptions options, SchedulerClient* scheduler, kernels::Backend* backend,
                 TrainTest data)
    : options_(std::move(options)),
      scheduler_(scheduler),
      backend_(backend),
      data_(std::move(data)),
      start_(absl::Now()),
      sampler_(options_.job.seed(), data_.train.size, options_.job.batch_size(),
               ClocksPerEpoch(options_.job)),
      eval_seqs_(kEvalSeqs) {}

void Trainer::NextBatch(int64_t clock, int num_shares, int share_index, Batch* batch) {
  const JobSpec& job = options_.job;
  if (job.data().dataset() == TEXT) {
    TextBatch(data_.train_text, job.model().gpt().context(), job.seed(), clock, job.batch_size(),
              num_shares, share_index, batch);
  } else {
    Gather(data_.train, sampler_.Indices(clock, num_shares, share_index), batch);
  }
}

int64_t Trainer::Epoch(int64_t clock) const { return sampler_.Epoch(clock); }

absl::StatusOr<double> Trainer::Evaluate(Model& model) {
  Batch batch;
  int64_t correct = 0, predicted = 0;
  if (options_.job.data().dataset() == TEXT) {
    // The validation text's non-overlapping windows, at most kMaxWindows.
    constexpr int64_t kMaxWindows = 512;
    const int context = options_.job.model().gpt().context();
    const int64_t windows = std::min(kMaxWindows, TextWindows(data_.validation_text, context));
    double loss_sum = 0;
    for (int64_t first = 0; first < windows; first += eval_seqs_) {
      const int n = static_cast<int>(std::min<int64_t>(eval_seqs_, windows - first));
      TextSlice(data_.validation_text, context, first, n, &batch);
      ASSIGN_OR_RETURN(const StepResult r, EvaluateBatch(model, first, batch));
      loss_sum += static_cast<double>(r.loss) * r.predicted;
      correct += r.correct;
      predicted += r.predicted;
    }
    absl::MutexLock lock(&mu_);
    if (predicted > 0) validation_loss_ = loss_sum / predicted;
  } else {
    constexpr int kEvalBatch = 1000;
    std::vector<int64_t> idx;
    for (int64_t first = 0; first < data_.test.size; first += kEvalBatch) {
      const int64_t n = std::min<int64_t>(kEvalBatch, data_.test.size - first);
      idx.resize(n);
      for (int64_t i = 0; i < n; ++i) idx[i] = first + i;
      Gather(data_.test, idx, &batch);
      ASSIGN_OR_RETURN(const StepResult r, EvaluateBatch(model, first, batch));
      correct += r.correct;
      predicted += r.predicted;
    }
  }
  // A pipeline stage before the last predicts nothing: no accuracy (-1).
  if (predicted == 0) return pipeline_ != nullptr ? -1.0 : 0.0;
  return static_cast<double>(correct) / predicted;
}

absl::StatusOr<StepResult> Trainer::EvaluateBatch(Model& model, int64_t tag, const Batch& batch) {
  // Evaluation batches are tagged -1, -2, ... (clocks are >= 0).
  if (pipeline_ != nullptr) return pipeline_->Evaluate(-1 - tag, batch);
  return model.Evaluate(batch);
}

absl::StatusOr<std::unique_ptr<Model>> Trainer::MakeWorkerModel(int* split) {
  const JobSpec& job = options_.job;
  const int stages = std::max(1, job.pipeline_stages());
  const int s = StageOf(options_.worker_id, stages);
  const Stage stage = stages == 1 ? WholeModel(job.model()) : (*PlanStages(job.model(), stages))[s];
  const TrainingOptions& training = options_.training;
  if (training.device_memory_budget <= 0) {
    return MakeStageModel(job.model(), stage, backend_, training.recompute);
  }
  if (job.model().kind() != GPT) {
    return absl::InvalidArgumentError(
        "--device_memory_budget is for GPT models (this job's is an MLP)");
  }
  // A micro-batch's sequences, the micro-batches whose activations a stage
  // keeps at once, and the validation batch (Evaluate's).
  const int replicas = job.num_workers() / stages;
  const int seqs = std::max(1, job.batch_size() / replicas / job.micro_batches());
  const int m = job.micro_batches();
  const int stashes = stages == 1                        ? 1
                      : job.pipeline_schedule() == GPIPE ? m
                                                         : std::min(m, stages - s);
  ASSIGN_OR_RETURN(const GptMemoryPlan plan,
                   PlanGptMemory(job.model(), stage, seqs, stashes, kEvalSeqs,
                                 training.device_memory_budget, /*may_split=*/stages == 1));
  spdlog::info("{}", plan.Describe());
  *split = plan.split;
  eval_seqs_ = plan.eval_seqs;
  backend_->SetMemoryLimit(plan.budget);
  return MakeStageModel(job.model(), stage, backend_, training.recompute, &plan);
}

void Trainer::UsePipeline(StageWorker* stage, ClockLoopOptions* lo) {
  pipeline_ = stage;
  lo->stages = options_.job.pipeline_stages();
  lo->replica = stage->replica();
  lo->training.overlap = false;  // a stage pushes once its micro-batches are done
  lo->stage_step = [stage](int64_t clock, const Batch& batch, ParamBuffers* grads) {
    return stage->Step(clock, batch, grads);
  };
  lo->on_cluster = [stage](const ClusterMembers& cluster, int64_t link_generation) {
    return stage->Connect(cluster, link_generation);
  };
}

void Trainer::InterruptLinks(int64_t link_generation) {
  absl::MutexLock lock(&links_mu_);
  if (links_ != nullptr) links_->Interrupt(link_generation);
}

void Trainer::CancelLinks(const absl::Status& why) {
  absl::MutexLock lock(&links_mu_);
  if (links_ != nullptr) links_->Cancel(why);
}

void Trainer::NoteCorpus() {
  const JobSpec& job = options_.job;
  const double entropy = UnigramEntropy(data_.train_text + data_.validation_text);
  if (options_.worker_id == 0) {
    spdlog::info("corpus {}: {} training and {} validation bytes; unigram entropy {:.4f} nats/byte",
                 job.data().path(), data_.train_text.size(), data_.validation_text.size(), entropy);
  }
  absl::MutexLock lock(&mu_);
  unigram_entropy_ = entropy;
}

ClockLoopOptions Trainer::LoopOptions(int split) const {
  ClockLoopOptions lo;
  lo.job = options_.job;
  lo.worker_id = options_.worker_id;
  lo.start_clock = options_.start_clock;
  lo.generation = options_.generation;
  lo.training = options_.training;
  // (overlap: worker/overlap.h's decision; not with the memory plan's
  // micro-batches, whose gradients add up first)
  lo.training.overlap = options_.training.overlap && split == 1;
  // The memory plan's smaller micro-batches, their gradients added up.
  lo.job.set_micro_batches(options_.job.micro_batches() * split);
  lo.replica = options_.worker_id;
  return lo;
}

absl::StatusOr<double> Trainer::Run(const std::atomic<bool>& stop) {
  const JobSpec& job = options_.job;
  const int worker_id = options_.worker_id;
  int split = 1;
  ASSIGN_OR_RETURN(const std::unique_ptr<Model> model, MakeWorkerModel(&split));
  if (job.data().dataset() == TEXT) NoteCorpus();
  // The chunks as each generation's cluster places them (a move changes it).
  PlacedPartitions partitions(ModelParams(job.model()), job.chunk_bytes(), job.num_servers());
  RETURN_IF_ERROR(partitions.For(ClusterMembers()).status());
  ClockLoopOptions lo = LoopOptions(split);
  std::optional<StageWorker> stage;
  if (job.pipeline_stages() > 1) {
    stage.emplace(job, worker_id, options_.ps.wire_dtype, model.get(), options_.stage_link);
    UsePipeline(&*stage, &lo);
  }
  // Standalone (no scheduler): the servers' store in this process.
  std::unique_ptr<StandaloneServer> alone;
  std::unique_ptr<GateClient> gate;
  if (scheduler_ == nullptr) {
    ASSIGN_OR_RETURN(alone, StandaloneServer::Make(job, /*threads=*/0));
    gate = std::make_unique<StandaloneGate>();
  } else {
    gate = std::make_unique<SchedulerGate>(scheduler_);
  }
  auto make_params = [&](const ClusterMembers& cluster, int64_t generation, bool fp32,
                         std::function<bool()> abandon) -> std::unique_ptr<ParamClient> {
    if (alone != nullptr) return alone->Client();
    PsClientOptions o =
        options_.ps.ForGeneration(generation, fp32, std::move(abandon), job.standby_copies(),
                                  [client = scheduler_] { return client->routes(); });
    o.first_param = model->stage().first_param;
    o.end_param = model->stage().end_param;
    return std::make_unique<AsyncPsClient>(cluster, PlacedOrLogged(partitions, cluster), worker_id,
                                           o);
  };
  ClockLoop loop(lo, gate.get(), make_params, this, model.get(), backend_);
  {
    absl::MutexLock lock(&mu_);
    loop_ = &loop;
  }
  if (stage.has_value()) {
    absl::MutexLock lock(&links_mu_);
    links_ = &*stage;
  }
  // A failed allocation while training is an error like any other here,
  // where `loop_` and `links_` are still to be cleared.
  const absl::StatusOr<double> acc =
      OutOfMemoryAsError("while training", [&] { return loop.Run(stop); });
  {
    absl::MutexLock lock(&links_mu_);
    links_ = nullptr;
  }
  {
    absl::MutexLock lock(&mu_);
    last_ = loop.metrics();
    loop_ = nullptr;
  }
  pipeline_ = nullptr;
  if (!acc.ok()) return acc;
  RETURN_IF_ERROR(Finish(*model, loop, *acc));
  return acc;
}

absl::Status Trainer::Finish(const Model& model, const ClockLoop& loop, double acc) {
  const JobSpec& job = options_.job;
  const int64_t total = TotalClocks(job);
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start_);
  // Worker 0, or with pipeline stages the last stage of replica 0: the
  // first worker that computes the loss. A stage before the last has none.
  const bool first_with_loss = options_.worker_id == std::max(1, job.pipeline_stages()) - 1;
  if (acc < 0) {
    // A pipeline stage before the last: its replica's last stage reports.
  } else if (first_with_loss && job.data().dataset() == TEXT) {
    double loss, entropy;
    {
      absl::MutexLock lock(&mu_);
      loss = validation_loss_;
      entropy = unigram_entropy_;
    }
    spdlog::info(
        "final validation loss {:.4f} nats/byte ({:.3f} bits) against the corpus' unigram "
        "entropy {:.4f} nats/byte ({:.3f} bits); next-byte accuracy {:.4f}; after {} clocks "
        "({:.1f} s)",
        loss, loss / std::log(2.0), entropy, entropy / std::log(2.0), acc, total, elapsed);
  } else if (job.data().dataset() != TEXT) {
    // Every worker says it: after a failure the survivors' logs hold it.
    spdlog::info("final test accuracy {:.4f} on {} examples after {} clocks ({:.1f} s)", acc,
                 data_.test.size, total, elapsed);
  }
  if (options_.worker_id == 0) {
    const ClockMetrics m = loop.metrics();
    spdlog::info("this worker pushed {} bytes and pulled {} bytes of {} in training", m.bytes_out,
                 m.bytes_in, DTypeName(options_.ps.wire_dtype));
  }
  if (options_.training.weights_out.empty()) return absl::OkStatus();
  return WriteWeights(options_.training.weights_out, total, model, model.weights());
}

MemberStatus Trainer::Status() const {
  MemberStatus st;
  st.set_role(WORKER);
  st.set_id(options_.worker_id);
  st.set_uptime_s(absl::ToDoubleSeconds(absl::Now() - start_));
  st.set_rss_bytes(ResidentBytes());
  absl::MutexLock lock(&mu_);
  SetLoopStatus(loop_ != nullptr ? loop_->metrics() : last_, &st);
  st.mutable_worker()->set_validation_loss(validation_loss_);
  st.mutable_worker()->set_unigram_entropy(unigram_entropy_);
  st.mutable_worker()->set_wire_dtype(DTypeName(options_.ps.wire_dtype));
  st.mutable_worker()->set_start_clock(options_.start_clock);
  const int stages = std::max(1, options_.job.pipeline_stages());
  st.mutable_worker()->set_replica(ReplicaOf(options_.worker_id, stages));
  st.mutable_worker()->set_stage(StageOf(options_.worker_id, stages));
  return st;
}

}  // namespace pstrain
