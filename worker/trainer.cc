#include "worker/trainer.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/partition.h"
#include "common/process_stats.h"
#include "common/status_macros.h"
#include "proto/tensor.pb.h"
#include "worker/async_pusher.h"
#include "worker/loss_scaler.h"
#include "worker/model.h"
#include "worker/ps_client.h"
#include "worker/weight_prefetch.h"

namespace pstrain {
namespace {

// The L2 norm of a whole gradient (every parameter).
float GlobalNorm(const std::vector<std::vector<float>>& grads) {
  double sum = 0;
  for (const std::vector<float>& g : grads) {
    for (float v : g) sum += static_cast<double>(v) * v;
  }
  return static_cast<float>(std::sqrt(sum));
}

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
      start_(absl::Now()) {}

absl::StatusOr<StepResult> Trainer::TrainStep(Model& model, const Batch& batch,
                                              std::vector<std::vector<float>>* accumulated) {
  const int k = options_.job.accum_steps();
  if (k <= 1) return model.TrainStep(batch);
  // The mean gradient over the batch from k micro-batches: each one's mean
  // weighted by its share of the rows.
  accumulated->resize(model.params().size());
  for (size_t p = 0; p < model.params().size(); ++p) {
    (*accumulated)[p].assign(model.params()[p].numel, 0.0f);
  }
  StepResult total;
  double loss = 0;
  for (int m = 0; m < k; ++m) {
    const auto [begin, end] = RankSlice(batch.rows, k, m);
    if (begin == end) continue;
    ASSIGN_OR_RETURN(const StepResult r, model.TrainStep(SliceBatch(batch, begin, end)));
    const float share = static_cast<float>(end - begin) / static_cast<float>(batch.rows);
    for (size_t p = 0; p < model.params().size(); ++p) {
      const std::vector<float>& g = model.grads()[p];
      std::vector<float>& acc = (*accumulated)[p];
      for (size_t i = 0; i < g.size(); ++i) acc[i] += share * g[i];
    }
    loss += static_cast<double>(r.loss) * share;
    total.correct += r.correct;
    total.predicted += r.predicted;
  }
  total.loss = static_cast<float>(loss);
  return total;
}

absl::StatusOr<double> Trainer::EvaluateTest(Model& model) {
  Batch batch;
  int64_t correct = 0, predicted = 0;
  if (options_.job.data().dataset() == TEXT) {
    // The validation text's non-overlapping windows, at most kMaxWindows.
    constexpr int64_t kMaxWindows = 512, kEvalSeqs = 32;
    const int context = options_.job.model().gpt().context();
    const int64_t windows = std::min(kMaxWindows, TextWindows(data_.validation_text, context));
    double loss_sum = 0;
    for (int64_t first = 0; first < windows; first += kEvalSeqs) {
      const int n = static_cast<int>(std::min(kEvalSeqs, windows - first));
      TextSlice(data_.validation_text, context, first, n, &batch);
      ASSIGN_OR_RETURN(const StepResult r, model.Evaluate(batch));
      loss_sum += static_cast<double>(r.loss) * r.predicted;
      correct += r.correct;
      predicted += r.predicted;
    }
    absl::MutexLock lock(&mu_);
    validation_loss_ = predicted == 0 ? -1 : loss_sum / predicted;
  } else {
    constexpr int kEvalBatch = 1000;
    std::vector<int64_t> idx;
    for (int64_t first = 0; first < data_.test.size; first += kEvalBatch) {
      const int64_t n = std::min<int64_t>(kEvalBatch, data_.test.size - first);
      idx.resize(n);
      for (int64_t i = 0; i < n; ++i) idx[i] = first + i;
      Gather(data_.test, idx, &batch);
      ASSIGN_OR_RETURN(const StepResult r, model.Evaluate(batch));
      correct += r.correct;
      predicted += r.predicted;
    }
  }
  return predicted == 0 ? 0.0 : static_cast<double>(correct) / predicted;
}

absl::StatusOr<double> Trainer::Run(const std::atomic<bool>& stop) {
  const JobSpec& job = options_.job;
  const int rank = options_.worker_id;
  const int workers = job.num_workers();
  const int64_t total = TotalClocks(job);
  const int64_t per_epoch = ClocksPerEpoch(job);
  const std::unique_ptr<Model> model_ptr = MakeModel(job.model(), backend_, options_.recompute);
  Model& model = *model_ptr;
  const bool text = job.data().dataset() == TEXT;
  const double entropy = text ? UnigramEntropy(data_.train_text + data_.validation_text) : 0;
  if (text && rank == 0) {
    spdlog::info("corpus {}: {} training and {} validation bytes; unigram entropy {:.4f} nats/byte",
                 job.data().path(), data_.train_text.size(), data_.validation_text.size(), entropy);
  }
  {
    absl::MutexLock lock(&mu_);
    unigram_entropy_ = entropy;
  }
  ASSIGN_OR_RETURN(const Partition partition,
                   Partition::Make(model.params(), job.chunk_bytes(), job.num_servers()));
  BatchSampler sampler(job.seed(), data_.train.size, job.batch_size(), per_epoch);
  std::unique_ptr<PsClient> ps;
  // Layers' gradients pushed during the backward (see TrainerOptions::overlap).
  const char* no_overlap = job.accum_steps() > 1   ? "accum_steps above 1"
                           : options_.loss_scaling ? "fp16 loss scaling"
                           : job.optimizer().clip_norm() > 0 && job.consistency() != BSP
                               ? "clipping by the push's norm under SSP/ASP"
                               : nullptr;
  const bool overlap = options_.overlap && no_overlap == nullptr;
  if (options_.overlap && !overlap) {
    spdlog::info("--overlap is off for this job: a step needs its whole gradient first ({})",
                 no_overlap);
  }
  std::unique_ptr<AsyncPusher> pusher;
  // Under SSP and ASP with overlap, the next clock's weights are pulled
  // while this clock computes (worker/weight_prefetch.h).
  const bool prefetch = overlap && EffectiveStaleness(job) != 0;
  // Set on the way out of Run, before next_weights waits for a pull in
  // flight: the pull gives up at its next retry instead of waiting for a
  // read guarantee that may never come (a stopped or dead peer).
  std::atomic<bool> leaving{false};
  std::optional<WeightPrefetch> next_weights;
  if (prefetch) next_weights.emplace(model.params(), backend_);
  struct SetOnExit {
    std::atomic<bool>* flag;
    ~SetOnExit() { *flag = true; }
  } leave_guard{&leaving};
  ClusterView gate_cluster;  // the servers, from the last gate
  Batch batch;
  std::vector<std::vector<float>> accumulated;  // accum_steps > 1
  LossScaler scaler;
  std::vector<int> live;  // the live workers, from the last gate
  int64_t generation = options_.generation;
  generation_ = generation;

  // Clients of the servers of `cluster` for requests of the current generation.
  auto connect = [&](const ClusterView& cluster) -> absl::Status {
    if (cluster.servers_size() != job.num_servers()) {
      return absl::FailedPreconditionError("the scheduler's cluster view lacks servers");
    }
    if (pusher != nullptr) (void)pusher->Wait();  // of an older generation: abandoned
    if (next_weights) next_weights->Drop();
    gate_cluster = cluster;
    PsClientOptions o = options_.ps;
    o.generation = generation;
    o.abandon = [this, generation, &leaving, &stop] {
      return leaving || stop || generation_ > generation || scheduler_->generation() > generation;
    };
    ps = std::make_unique<PsClient>(gate_cluster, &partition, rank, o);
    if (overlap) {
      pusher = std::make_unique<AsyncPusher>(
          std::make_unique<PsClient>(gate_cluster, &partition, rank, o));
      model.set_grads_ready([&pusher](const std::vector<int>& params) { pusher->Push(params); });
    }
    return absl::OkStatus();
  };
  // Takes a gate's answer; true when it says the cluster rolled back (the
  // worker then resumes at the answer's clock, set in *clock).
  auto adopt = [&](const AdvanceClockResponse& gate, int64_t* clock) -> absl::StatusOr<bool> {
    live.assign(gate.live_workers().begin(), gate.live_workers().end());
    const bool rolled_back = gate.generation() != generation;
    if (rolled_back) {
      spdlog::warn("the cluster rolled back (generation {}): resuming at clock {} (was at {})",
                   gate.generation(), gate.resume_clock(), *clock);
      generation = gate.generation();
      generation_ = generation;
      *clock = gate.resume_clock();
    }
    if (rolled_back || ps == nullptr) {
      if (ps == nullptr) {
        spdlog::info("cluster complete: {} servers, {} workers; {} clocks ({} per epoch){}",
                     job.num_servers(), workers, total, per_epoch,
                     *clock > 0 ? absl::StrCat("; starting at clock ", *clock) : "");
      }
      RETURN_IF_ERROR(connect(gate.cluster()));
    }
    return rolled_back;
  };
  // After a failed pull or push: did the cluster roll back? The scheduler
  // answers once every server has restored the checkpoint. If not, the
  // failure stands.
  auto resync = [&](const absl::Status& failure, int64_t* clock) -> absl::Status {
    if (stop) return absl::CancelledError("interrupted");
    ASSIGN_OR_RETURN(const AdvanceClockResponse gate,
                     scheduler_->AdvanceClock(rank, *clock, generation));
    if (gate.generation() == generation) return failure;
    return adopt(gate, clock).status();
  };

  absl::Time window_start = absl::Now();
  int64_t window_clocks = 0;
  double window_loss = 0;
  absl::Duration t_gate, t_pull, t_compute, t_push;
  int64_t clock = options_.start_clock;
  PsClientOptions final_options = options_.ps;
  std::unique_ptr<PsClient> final_ps;
  double acc = 0;
  while (true) {
    if (stop) return absl::CancelledError("interrupted");
    if (clock >= total) {
      // Report the last clock, then read every worker's every update. The
      // final read is of the fp32 master weights whatever the wire dtype:
      // they are what the job trained (and what --weights_out writes).
      ASSIGN_OR_RETURN(const AdvanceClockResponse gate,
                       scheduler_->AdvanceClock(rank, total, generation));
      ASSIGN_OR_RETURN(const bool rolled_back, adopt(gate, &clock));
      if (rolled_back) continue;
      final_options.wire_dtype = FP32;
      final_options.generation = generation;
      final_ps = std::make_unique<PsClient>(gate_cluster, &partition, rank, final_options);
      const absl::Status read = final_ps->Pull(total, total, &model.weights());
      if (!read.ok()) {
        RETURN_IF_ERROR(resync(read, &clock));
        continue;
      }
      ASSIGN_OR_RETURN(acc, EvaluateTest(model));
      break;
    }
    const absl::Time t0 = absl::Now();
    if (overlap && ps != nullptr) {
      // Prefetch: the pull goes out with the gate instead of after it; the
      // servers hold it until its read guarantee (min_clock) holds, and the
      // step waits for both.
      absl::StatusOr<AdvanceClockResponse> gate;
      std::thread gate_thread([&] { gate = scheduler_->AdvanceClock(rank, clock, generation); });
      const bool prefetched = next_weights && next_weights->Has(clock);
      if (next_weights && !prefetched) next_weights->Drop();  // ps serves one pull at a time
      const absl::Status pulled =
          prefetched ? next_weights->Take(clock, &model.weights())
                     : ps->Pull(clock, MinClockForRead(job, clock), &model.weights());
      const absl::Time pulled_at = absl::Now();
      gate_thread.join();
      RETURN_IF_ERROR(gate.status());
      ASSIGN_OR_RETURN(const bool rolled_back, adopt(*gate, &clock));
      if (rolled_back) continue;
      if (!pulled.ok()) {
        RETURN_IF_ERROR(resync(pulled, &clock));
        continue;
      }
      t_pull += pulled_at - t0;
      t_gate += absl::Now() - pulled_at;  // what the gate added after the pull
    } else {
      ASSIGN_OR_RETURN(const AdvanceClockResponse gate,
                       scheduler_->AdvanceClock(rank, clock, generation));
      ASSIGN_OR_RETURN(const bool rolled_back, adopt(gate, &clock));
      if (rolled_back) continue;
      const absl::Time t1 = absl::Now();
      const absl::Status pulled = ps->Pull(clock, MinClockForRead(job, clock), &model.weights());
      if (!pulled.ok()) {
        RETURN_IF_ERROR(resync(pulled, &clock));
        continue;
      }
      t_gate += t1 - t0;
      t_pull += absl::Now() - t1;
    }
    if (prefetch && clock + 1 < total) {
      next_weights->Start(
          clock + 1, MinClockForRead(job, clock + 1),
          [&ps](int64_t c, int64_t min_clock, std::vector<std::vector<float>>* into) {
            return ps->Pull(c, min_clock, into);
          });
    }
    const absl::Time t2 = absl::Now();
    if (options_.debug_slowdown_ms > 0)
      absl::SleepFor(absl::Milliseconds(options_.debug_slowdown_ms));
    // The clock's global batch is split among the live workers: a dead
    // worker's share goes to the others.
    int share_of = workers, share = rank;
    if (!live.empty()) {
      share_of = static_cast<int>(live.size());
      share = static_cast<int>(std::find(live.begin(), live.end(), rank) - live.begin());
      if (share == share_of) return absl::FailedPreconditionError("this worker is not live");
    }
    if (text) {
      TextBatch(data_.train_text, job.model().gpt().context(), job.seed(), clock, job.batch_size(),
                share_of, share, &batch);
    } else {
      Gather(data_.train, sampler.Indices(clock, share_of, share), &batch);
    }
    const int rows = batch.rows;
    if (options_.loss_scaling) model.set_loss_scale(scaler.scale());
    if (overlap) pusher->Begin(clock, rows, &model.grads());
    ASSIGN_OR_RETURN(const StepResult step, TrainStep(model, batch, &accumulated));
    std::vector<std::vector<float>>& grads =
        job.accum_steps() > 1 ? accumulated : model.mutable_grads();
    // An fp16 overflow skips the step: the push carries the non-finite
    // gradient, which every server counts and does not apply (a BSP round
    // closes over the other workers' samples).
    const bool finite = !options_.loss_scaling || scaler.Unscale(&grads);
    const absl::Time t3 = absl::Now();
    absl::Status pushed;
    if (overlap) {
      // The layers' pushes went out during the backward; wait for the last.
      pushed = pusher->Wait();
    } else {
      const float norm = job.optimizer().clip_norm() > 0 && finite ? GlobalNorm(grads) : 0.0f;
      pushed = ps->Push(clock, rows, grads, norm);
    }
    if (!pushed.ok()) {
      RETURN_IF_ERROR(resync(pushed, &clock));
      continue;
    }
    const absl::Time t4 = absl::Now();
    t_compute += t3 - t2;
    t_push += t4 - t3;
    window_loss += step.loss;
    ++window_clocks;
    {
      absl::MutexLock lock(&mu_);
      clock_ = clock + 1;
      loss_ = step.loss;
      peak_device_bytes_ = backend_->peak_bytes();
      loss_scale_ = options_.loss_scaling ? scaler.scale() : 1.0;
      skipped_steps_ = scaler.overflows();
      bytes_in_ = ps->bytes_in();
      bytes_out_ = ps->bytes_out() + (pusher ? pusher->bytes_out() : 0);
      ++pushes_;
      ++pulls_;
    }
    const bool epoch_end = (clock + 1) % per_epoch == 0;
    if (window_clocks == job.log_every() || clock + 1 == total || epoch_end) {
      const double secs = absl::ToDoubleSeconds(absl::Now() - window_start);
      const double rate = secs > 0 ? window_clocks * job.batch_size() / secs : 0;
      {
        absl::MutexLock lock(&mu_);
        samples_per_s_ = rate;
        gate_ms_ = absl::ToDoubleMilliseconds(t_gate) / window_clocks;
        pull_ms_ = absl::ToDoubleMilliseconds(t_pull) / window_clocks;
        compute_ms_ = absl::ToDoubleMilliseconds(t_compute) / window_clocks;
        push_ms_ = absl::ToDoubleMilliseconds(t_push) / window_clocks;
      }
      if (rank == 0) {
        spdlog::info(
            "clock {}/{} epoch {} loss {:.4f} samples/s {:.0f} (per clock: gate {:.1f} ms, "
            "pull {:.1f} ms, compute {:.1f} ms, push {:.1f} ms)",
            clock + 1, total, sampler.Epoch(clock), window_loss / window_clocks, rate,
            absl::ToDoubleMilliseconds(t_gate) / window_clocks,
            absl::ToDoubleMilliseconds(t_pull) / window_clocks,
            absl::ToDoubleMilliseconds(t_compute) / window_clocks,
            absl::ToDoubleMilliseconds(t_push) / window_clocks);
      }
      window_start = absl::Now();
      window_clocks = 0;
      window_loss = 0;
      t_gate = t_pull = t_compute = t_push = absl::ZeroDuration();
    }
    if (epoch_end && rank == 0 && options_.eval_each_epoch && clock + 1 < total) {
      ASSIGN_OR_RETURN(const double epoch_acc, EvaluateTest(model));
      spdlog::info("epoch {} done: test accuracy {:.4f} (weights of clock {})",
                   sampler.Epoch(clock), epoch_acc, clock);
      absl::MutexLock lock(&mu_);
      test_accuracy_ = epoch_acc;
      window_start = absl::Now();  // samples/s counts training only
    }
    ++clock;
  }
  {
    absl::MutexLock lock(&mu_);
    test_accuracy_ = acc;
    clock_ = total;
    bytes_in_ = ps->bytes_in() + final_ps->bytes_in();
  }
  if (rank == 0 && text) {
    double loss;
    {
      absl::MutexLock lock(&mu_);
      loss = validation_loss_;
    }
    spdlog::info(
        "final validation loss {:.4f} nats/byte ({:.3f} bits) against the corpus' unigram "
        "entropy {:.4f} nats/byte ({:.3f} bits); next-byte accuracy {:.4f}; after {} clocks "
        "({:.1f} s)",
        loss, loss / std::log(2.0), entropy, entropy / std::log(2.0), acc, total,
        absl::ToDoubleSeconds(absl::Now() - start_));
  } else if (!text) {
    // Every worker says it: after a failure the survivors' logs hold it.
    spdlog::info("final test accuracy {:.4f} on {} examples after {} clocks ({:.1f} s)", acc,
                 data_.test.size, total, absl::ToDoubleSeconds(absl::Now() - start_));
  }
  if (rank == 0) {
    spdlog::info("this worker pushed {} bytes and pulled {} bytes of {} in training",
                 ps->bytes_out() + (pusher ? pusher->bytes_out() : 0), ps->bytes_in(),
                 DTypeName(ps->wire_dtype()));
  }
  if (!options_.weights_out.empty()) {
    RETURN_IF_ERROR(WriteWeights(options_.weights_out, total, model, model.weights()));
  }
  return acc;
}

NodeStatus Trainer::Status() const {
  NodeStatus st;
  st.set_role(WORKER);
  st.set_id(options_.worker_id);
  st.set_uptime_s(absl::ToDoubleSeconds(absl::Now() - start_));
  st.set_rss_bytes(ResidentBytes());
  absl::MutexLock lock(&mu_);
  st.set_clock(clock_);
  st.set_loss(loss_);
  st.set_samples_per_s(samples_per_s_);
  st.set_test_accuracy(test_accuracy_);
  st.set_validation_loss(validation_loss_);
  st.set_peak_device_bytes(peak_device_bytes_);
  st.set_unigram_entropy(unigram_entropy_);
  st.set_loss_scale(loss_scale_);
  st.set_gate_ms(gate_ms_);
  st.set_pull_ms(pull_ms_);
  st.set_compute_ms(compute_ms_);
  st.set_push_ms(push_ms_);
  st.set_skipped_steps(skipped_steps_);
  st.set_bytes_in(bytes_in_);
  st.set_bytes_out(bytes_out_);
  st.set_pushes(pushes_);
  st.set_pulls(pulls_);
  st.set_wire_dtype(DTypeName(options_.ps.wire_dtype));
  st.set_generation(generation_);
  return st;
}

}  // namespace pstrain
