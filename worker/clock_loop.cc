#include "worker/clock_loop.h"

#include <algorithm>
#include <future>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/status_macros.h"
#include "worker/data/dataset.h"

namespace pstrain {
namespace {

// The L2 norm of a whole gradient (every parameter).
float GlobalNorm(const ParamBuffers& grads) {
  double sum = 0;
  for (const std::vector<float>& g : grads) {
    for (float v : g) sum += static_cast<double>(v) * v;
  }
  return static_cast<float>(std::sqrt(sum));
}

}  // namespace

ClockLoop::ClockLoop(ClockLoopOptions options, GateClient* gate, ParamClientFactory params,
                     DataSource* data, Model* model, kernels::Backend* backend)
    : options_(std::move(options)),
      total_(TotalClocks(options_.job)),
      schedule_(options_.job),
      gate_(gate),
      make_params_(std::move(params)),
      data_(data),
      model_(model),
      backend_(backend),
      generation_(options_.generation),
      clock_(options_.start_clock) {
  // Under SSP and ASP the next clock's weights come while this one computes.
  if (options_.overlap && EffectiveStaleness(options_.job) != 0) {
    prefetch_.emplace(model_->params(), backend_);
  }
  if (options_.overlap) {
    model_->set_grads_ready([this](const std::vector<int>& params) {
      push_tickets_.push_back(params_->Push(clock_, batch_.rows, &model_->grads(), 0.0f, params));
    });
  }
  absl::MutexLock lock(&mu_);
  metrics_.generation = options_.generation;
}

ClockLoop::~ClockLoop() {
  leaving_ = true;
  model_->set_grads_ready(nullptr);
}

ClockMetrics ClockLoop::metrics() const {
  absl::MutexLock lock(&mu_);
  return metrics_;
}

absl::Status ClockLoop::Connect(const ClusterView& cluster) {
  if (cluster.servers_size() != options_.job.num_servers()) {
    return absl::FailedPreconditionError("the scheduler's cluster view lacks servers");
  }
  // Calls of an older generation end first (abandoned at their next retry).
  if (prefetch_ && params_ != nullptr) prefetch_->Drop(params_.get());
  for (auto* tickets : {&older_push_tickets_, &push_tickets_}) {
    for (ParamTicket t : *tickets) (void)params_->Wait(t);
    tickets->clear();
  }
  if (params_ != nullptr) {
    calls_retired_ += params_->rpcs();
    bytes_retired_ += params_->bytes_in() + params_->bytes_out();
  }
  params_.reset();
  cache_fresh_ = -1;  // weights of another generation
  cluster_ = cluster;
  const int64_t generation = generation_;
  params_ = make_params_(cluster_, generation, /*fp32=*/false, [this, generation] {
    return leaving_ || (stop_ != nullptr && *stop_) || generation_ > generation ||
           gate_->generation() > generation;
  });
  return options_.on_cluster ? options_.on_cluster(cluster, link_epoch_) : absl::OkStatus();
}

absl::StatusOr<AdvanceClockResponse> ClockLoop::CallGate(int64_t clock, bool relink) {
  return gate_->AdvanceClock(GateRequest(clock, relink));
}

std::future<absl::StatusOr<AdvanceClockResponse>> ClockLoop::CallGateAsync(int64_t clock) {
  return gate_->AdvanceClockAsync(GateRequest(clock, false));
}

AdvanceClockRequest ClockLoop::GateRequest(int64_t clock, bool relink) {
  if (gate_->remote()) ++gates_;
  AdvanceClockRequest req;
  req.set_worker_id(options_.rank);
  req.set_clock(clock);
  req.set_generation(generation_);
  req.set_link_epoch(link_epoch_);
  req.set_relink(relink);
  return req;
}

absl::StatusOr<bool> ClockLoop::Adopt(const AdvanceClockResponse& gate) {
  live_.assign(gate.live_workers().begin(), gate.live_workers().end());
  if (gate.end_clock() > 0 && gate.end_clock() < total_ && gate.end_clock() >= clock_) {
    spdlog::info("the job drains: it ends at clock {} (was {})", gate.end_clock(), total_);
    total_ = gate.end_clock();
  }
  checkpoint_asked_ = std::max(checkpoint_asked_, gate.checkpoint_clock());
  schedule_.Set({gate.consistency_changes().begin(), gate.consistency_changes().end()});
  const bool rolled_back = gate.generation() != generation_;
  const bool restarted = !rolled_back && params_ != nullptr && options_.stages > 1 &&
                         gate.link_epoch() != link_epoch_;
  link_epoch_ = gate.link_epoch();
  if (rolled_back) {
    spdlog::warn("the cluster rolled back (generation {}): resuming at clock {} (was at {})",
                 gate.generation(), gate.resume_clock(), clock_);
    generation_ = gate.generation();
    clock_ = gate.resume_clock();
    absl::MutexLock lock(&mu_);
    metrics_.generation = generation_;
    metrics_.clock = clock_;  // heartbeats say where it is now (a scheduler may catch up from it)
  }
  if (restarted) {
    spdlog::warn("replica {}'s pipeline restarted (link epoch {}): resuming at clock {} (was at {})",
                 options_.replica, link_epoch_, gate.resume_clock(), clock_);
    clock_ = gate.resume_clock();
    {
      absl::MutexLock lock(&mu_);
      metrics_.clock = clock_;
    }
    RETURN_IF_ERROR(options_.on_cluster(gate.cluster(), link_epoch_));
    return true;
  }
  if (rolled_back || params_ == nullptr) {
    if (params_ == nullptr) {
      spdlog::info("cluster complete: {} servers, {} workers; {} clocks ({} per epoch){}",
                   options_.job.num_servers(), options_.job.num_workers(), total_,
                   ClocksPerEpoch(options_.job),
                   clock_ > 0 ? absl::StrCat("; starting at clock ", clock_) : "");
    }
    RETURN_IF_ERROR(Connect(gate.cluster()));
  }
  if (params_ != nullptr) params_->SetPushContext(CurrentPushContext());
  return rolled_back;
}

absl::StatusOr<bool> ClockLoop::TakePendingGate() {
  if (!pending_gate_.valid()) return false;
  ASSIGN_OR_RETURN(const AdvanceClockResponse gate, pending_gate_.get());
  return Adopt(gate);
}

absl::Status ClockLoop::Resync(const absl::Status& failure) {
  if (*stop_) return absl::CancelledError("interrupted");
  ASSIGN_OR_RETURN(const bool moved, TakePendingGate());
  if (moved) return absl::OkStatus();
  ASSIGN_OR_RETURN(const AdvanceClockResponse gate, CallGate(clock_));
  if (gate.generation() == generation_) return failure;
  return Adopt(gate).status();
}

absl::Status ClockLoop::Relink(const absl::Status& failure) {
  if (*stop_) return absl::CancelledError("interrupted");
  const absl::StatusCode code = failure.code();
  if (code != absl::StatusCode::kUnavailable && code != absl::StatusCode::kAborted &&
      code != absl::StatusCode::kDeadlineExceeded && code != absl::StatusCode::kCancelled) {
    return failure;
  }
  spdlog::warn("clock {} failed on this stage's links: {}", clock_, failure.message());
  const absl::StatusOr<AdvanceClockResponse> gate = CallGate(clock_, /*relink=*/true);
  if (!gate.ok()) {
    return gate.status().code() == absl::StatusCode::kFailedPrecondition ? failure : gate.status();
  }
  ASSIGN_OR_RETURN(const bool moved, Adopt(*gate));
  return moved ? absl::OkStatus() : failure;
}

absl::StatusOr<bool> ClockLoop::GateAndPull() {
  const absl::Time t0 = absl::Now();
  // The weights came while the last clock computed (the prefetch), or the
  // pull goes out with the gate call (with overlap: the servers hold it
  // until its read guarantee holds), or after the gate opened.
  const bool prefetched = prefetch_ && params_ != nullptr && prefetch_->Has(clock_);
  if (prefetch_ && params_ != nullptr && !prefetched) prefetch_->Drop(params_.get());
  // Under SSP the weights at hand may be fresh enough already (the cache).
  const bool cached = !prefetched && params_ != nullptr && CacheServes(clock_);
  auto pull = [this] {
    return params_->Pull(clock_, schedule_.MinClockForRead(clock_), &model_->weights(),
                         &read_applied_);
  };
  std::optional<ParamTicket> ticket;
  if (options_.overlap && params_ != nullptr && !prefetched && !cached) ticket = pull();
  const int64_t pull_clock = clock_;
  // The gate answers while the pushes of the clock before last finish: the
  // step writes the gradient set they read (Model::FlipGrads). The last
  // clock's go on (a pull of BSP's waits for them at the servers). Under
  // SSP and ASP the clock does not wait for its gate at all -- its pulls'
  // read guarantee bounds the staleness -- and the answer is taken at the
  // next clock's start (TakePendingGate): a rollback or a new set of live
  // workers is then seen one clock late. BSP (whose batch split must be the
  // gate's), pipeline stages and a loop not yet connected wait.
  const bool lazy = schedule_.StalenessAt(clock_) != 0 && options_.stages <= 1 &&
                    params_ != nullptr;
  const ParamClient* before = params_.get();
  ASSIGN_OR_RETURN(const bool moved, TakePendingGate());
  if (moved) return false;
  const absl::Time taken_at = absl::Now();
  std::future<absl::StatusOr<AdvanceClockResponse>> answer = CallGateAsync(clock_);
  absl::Status pushed = AwaitPushes(&older_push_tickets_);
  older_push_tickets_ = std::move(push_tickets_);
  push_tickets_.clear();
  const absl::Time pushed_at = absl::Now();
  if (lazy) {
    pending_gate_ = std::move(answer);
  } else {
    ASSIGN_OR_RETURN(const AdvanceClockResponse gate, answer.get());
    ASSIGN_OR_RETURN(const bool rolled_back, Adopt(gate));
    if (rolled_back || clock_ >= total_) return false;  // (or the job drained)
  }
  const absl::Time gated_at = absl::Now();
  if (!pushed.ok()) {
    RETURN_IF_ERROR(Resync(pushed));
    return false;
  }
  if (!cached) {  // (a loop not yet connected has no cache)
    if (before == nullptr || (!prefetched && !ticket.has_value())) ticket = pull();
    const absl::Status pulled =
        prefetched && before != nullptr
            ? prefetch_->Take(params_.get(), pull_clock, &model_->weights(), &read_applied_)
            : params_->Wait(*ticket);
    if (!pulled.ok()) {
      RETURN_IF_ERROR(Resync(pulled));
      return false;
    }
    Cache(read_applied_);
  }
  const absl::Duration gate = (taken_at - t0) + (gated_at - pushed_at);
  const absl::Duration pushing = pushed_at - taken_at, pulling = absl::Now() - gated_at;
  clock_split_.gate += gate;
  clock_split_.push += pushing;
  clock_split_.pull += pulling;
  Latencies& latencies = ProcessLatencies();
  latencies.gate_wait.Observe(gate);
  latencies.push.Observe(pushing);
  latencies.pull.Observe(pulling);
  if (prefetch_ && clock_ + 1 < total_ && !CacheServes(clock_ + 1)) {
    prefetch_->Start(params_.get(), clock_ + 1, schedule_.MinClockForRead(clock_ + 1));
  }
  return true;
}

bool ClockLoop::CacheServes(int64_t clock) const {
  // SSP only: ASP's reads have no bound (the cache would never be left),
  // and BSP's must hold the last clock's update.
  return schedule_.StalenessAt(clock) > 0 && cache_fresh_ >= 0 &&
         cache_fresh_ >= schedule_.MinClockForRead(clock);
}

PushContext ClockLoop::CurrentPushContext() const {
  PushContext context;
  context.checkpoint_clock = checkpoint_asked_;
  if (options_.job.consistency() == BSP) {
    for (const ConsistencyChange& c : schedule_.changes()) {
      context.at_once.emplace_back(c.clock(), c.consistency() != BSP);
    }
  }
  return context;
}

void ClockLoop::Cache(const std::vector<int64_t>& applied) {
  {
    absl::MutexLock lock(&mu_);
    ++metrics_.pulls;
  }
  // The weights hold every live worker's updates of iterations below this.
  cache_fresh_ = -1;
  for (int w : live_) {
    if (w >= static_cast<int>(applied.size())) {
      cache_fresh_ = -1;  // unknown: no cache
      return;
    }
    cache_fresh_ = cache_fresh_ < 0 ? applied[w] : std::min(cache_fresh_, applied[w]);
  }
}

absl::Status ClockLoop::NextBatch() {
  // The clock's global batch is split among the live replicas (workers,
  // without pipeline stages): a dead one's share goes to the others.
  const int stages = std::max(1, options_.stages);
  int share_of = options_.job.num_workers() / stages, share = options_.replica;
  if (!live_.empty()) {
    std::vector<int> replicas;
    for (int w : live_) {
      if (replicas.empty() || replicas.back() != w / stages) replicas.push_back(w / stages);
    }
    share_of = static_cast<int>(replicas.size());
    share = static_cast<int>(std::find(replicas.begin(), replicas.end(), options_.replica) -
                             replicas.begin());
    if (share == share_of) return absl::FailedPreconditionError("this worker is not live");
  }
  data_->NextBatch(clock_, share_of, share, &batch_);
  return absl::OkStatus();
}

absl::StatusOr<StepResult> ClockLoop::Step() {
  if (options_.stage_step) {
    ASSIGN_OR_RETURN(const StageClock s, options_.stage_step(clock_, batch_, &accumulated_));
    const double total = s.busy_s + s.waiting_s;
    absl::MutexLock lock(&mu_);
    metrics_.bubble = total > 0 ? s.waiting_s / total : 0;
    metrics_.max_in_flight = std::max(metrics_.max_in_flight, s.max_in_flight);
    metrics_.activation_wait_ms = 1e3 * s.activation_wait_s;
    metrics_.gradient_wait_ms = 1e3 * s.gradient_wait_s;
    metrics_.activation_bytes_sent += s.activation_bytes_sent;
    metrics_.gradient_bytes_sent += s.gradient_bytes_sent;
    return s.result;
  }
  const int k = options_.job.micro_batches();
  if (k <= 1) return model_->TrainStep(batch_);
  // The mean gradient over the batch from k micro-batches: each one's mean
  // weighted by its share of the rows.
  accumulated_.resize(model_->params().size());
  for (size_t p = 0; p < model_->params().size(); ++p) {
    accumulated_[p].assign(model_->params()[p].numel, 0.0f);
  }
  StepResult total;
  double loss = 0;
  for (int m = 0; m < k; ++m) {
    const auto [begin, end] = RankSlice(batch_.rows, k, m);
    if (begin == end) continue;
    ASSIGN_OR_RETURN(const StepResult r, model_->TrainStep(SliceBatch(batch_, begin, end)));
    const float share = static_cast<float>(end - begin) / static_cast<float>(batch_.rows);
    for (size_t p = 0; p < model_->params().size(); ++p) {
      const std::vector<float>& g = model_->grads()[p];
      std::vector<float>& acc = accumulated_[p];
      for (size_t i = 0; i < g.size(); ++i) acc[i] += share * g[i];
    }
    loss += static_cast<double>(r.loss) * share;
    total.correct += r.correct;
    total.predicted += r.predicted;
  }
  total.loss = static_cast<float>(loss);
  return total;
}

void ClockLoop::Push(bool finite) {
  if (options_.overlap) return;  // the layers' pushes went out during the backward
  ParamBuffers& grads = Accumulates() ? accumulated_ : model_->mutable_grads();
  const float norm = options_.job.optimizer().clip_norm() > 0 && finite ? GlobalNorm(grads) : 0.0f;
  push_tickets_.push_back(params_->Push(clock_, batch_.rows, &grads, norm, {}));
}

absl::Status ClockLoop::AwaitPushes(std::vector<ParamTicket>* tickets) {
  absl::Status first;
  for (ParamTicket t : *tickets) first.Update(params_->Wait(t));
  tickets->clear();
  return first;
}

absl::StatusOr<bool> ClockLoop::ComputeAndPush() {
  const absl::Time t2 = absl::Now();
  if (options_.debug_slowdown_ms > 0) {
    absl::SleepFor(absl::Milliseconds(options_.debug_slowdown_ms));
  }
  RETURN_IF_ERROR(NextBatch());
  if (Accumulates()) {
    // One buffer of summed gradients: the last clock's pushes read it.
    if (const absl::Status pushed = AwaitPushes(&older_push_tickets_); !pushed.ok()) {
      RETURN_IF_ERROR(Resync(pushed));
      return false;
    }
  } else {
    model_->FlipGrads();
  }
  if (options_.loss_scaling) model_->set_loss_scale(scaler_.scale());
  const absl::StatusOr<StepResult> stepped = Step();
  if (!stepped.ok() && options_.stage_step) {
    RETURN_IF_ERROR(Relink(stepped.status()));
    return false;
  }
  RETURN_IF_ERROR(stepped.status());
  const StepResult& step = *stepped;
  // An fp16 overflow skips the step: the push carries the non-finite
  // gradient, which every server counts and does not apply (a BSP round
  // closes over the other workers' samples).
  ParamBuffers& grads = Accumulates() ? accumulated_ : model_->mutable_grads();
  const bool finite = !options_.loss_scaling || scaler_.Unscale(&grads);
  // The push goes on while the next clock's gate call does (see GateAndPull).
  Push(finite);
  clock_split_.compute += absl::Now() - t2;
  RETURN_IF_ERROR(AfterClock(step));
  return true;
}

absl::Status ClockLoop::AfterClock(const StepResult& step) {
  window_loss_ += step.loss;
  ++window_clocks_;
  window_split_.Add(clock_split_);
  CountRun();
  {
    absl::MutexLock lock(&mu_);
    metrics_.clock = clock_ + 1;
    metrics_.loss = step.loss;
    metrics_.peak_device_bytes = backend_->peak_bytes();
    metrics_.loss_scale = options_.loss_scaling ? scaler_.scale() : 1.0;
    metrics_.skipped_steps = scaler_.overflows();
    metrics_.bytes_in = params_->bytes_in();
    metrics_.bytes_out = params_->bytes_out();
    ++metrics_.pushes;
  }
  const JobSpec& job = options_.job;
  const bool epoch_end = (clock_ + 1) % ClocksPerEpoch(job) == 0;
  if (window_clocks_ == job.log_every() || clock_ + 1 == total_ || epoch_end) {
    const double secs = absl::ToDoubleSeconds(absl::Now() - window_start_);
    const double n = static_cast<double>(window_clocks_);
    const double samples_per_s = secs > 0 ? n * job.batch_size() / secs : 0;
    const ClockSplit split =
        PerClock(window_split_, Calls() - window_calls_, Bytes() - window_bytes_, n);
    window_calls_ = Calls();
    window_bytes_ = Bytes();
    {
      absl::MutexLock lock(&mu_);
      metrics_.samples_per_s = samples_per_s;
      metrics_.window = split;
    }
    // Worker 0, or the last stage of replica 0: the one that knows the loss.
    if (options_.rank == std::max(1, options_.stages) - 1) {
      spdlog::info(
          "clock {}/{} epoch {} loss {:.4f} samples/s {:.0f} (per clock: gate {:.1f} ms, "
          "pull {:.1f} ms, compute {:.1f} ms, push {:.1f} ms)",
          clock_ + 1, total_, data_->Epoch(clock_), window_loss_ / n, samples_per_s,
          split.gate_ms(), split.pull_ms(), split.compute_ms(), split.push_ms());
    }
    window_start_ = absl::Now();
    window_clocks_ = 0;
    window_loss_ = 0;
    window_split_ = Split();
  }
  if (epoch_end && options_.replica == 0 && options_.eval_each_epoch && clock_ + 1 < total_) {
    const absl::Time t0 = absl::Now();
    ASSIGN_OR_RETURN(const double acc, data_->Evaluate(*model_));
    run_evaluating_ += absl::Now() - t0;
    spdlog::info("epoch {} done: test accuracy {:.4f} (weights of clock {})", data_->Epoch(clock_),
                 acc, clock_);
    absl::MutexLock lock(&mu_);
    metrics_.test_accuracy = acc;
    window_start_ = absl::Now();  // samples/s counts training only
  }
  return absl::OkStatus();
}

void ClockLoop::CountRun() {
  const Split clock = clock_split_;
  clock_split_ = Split();
  if (!run_start_.has_value()) {
    // The first clock waited for the cluster to be complete: left out.
    run_start_ = absl::Now();
    run_calls_ = Calls();
    run_bytes_ = Bytes();
    return;
  }
  run_split_.Add(clock);
  ++run_clocks_;
  const double n = static_cast<double>(run_clocks_);
  absl::MutexLock lock(&mu_);
  metrics_.train_s = absl::ToDoubleSeconds(absl::Now() - *run_start_ - run_evaluating_);
  metrics_.clocks_trained = run_clocks_;
  metrics_.run = PerClock(run_split_, Calls() - run_calls_, Bytes() - run_bytes_, n);
}

ClockSplit ClockLoop::PerClock(const Split& split, int64_t calls, int64_t bytes, double n) {
  ClockSplit c;
  c.set_gate_ms(absl::ToDoubleMilliseconds(split.gate) / n);
  c.set_pull_ms(absl::ToDoubleMilliseconds(split.pull) / n);
  c.set_compute_ms(absl::ToDoubleMilliseconds(split.compute) / n);
  c.set_push_ms(absl::ToDoubleMilliseconds(split.push) / n);
  c.set_rpcs(static_cast<double>(calls) / n);
  c.set_bytes(static_cast<double>(bytes) / n);
  return c;
}

int64_t ClockLoop::Calls() const {
  return gates_ + calls_retired_ + (params_ != nullptr ? params_->rpcs() : 0);
}

int64_t ClockLoop::Bytes() const {
  return bytes_retired_ + (params_ != nullptr ? params_->bytes_in() + params_->bytes_out() : 0);
}

absl::StatusOr<bool> ClockLoop::FinalRead() {
  // Report the last clock, then read every worker's every update. The
  // final read is of the fp32 master weights whatever the wire dtype: they
  // are what the job trained (and what --weights_out writes).
  ASSIGN_OR_RETURN(const bool moved, TakePendingGate());
  if (moved) return false;
  ASSIGN_OR_RETURN(const AdvanceClockResponse gate, CallGate(total_));
  ASSIGN_OR_RETURN(const bool rolled_back, Adopt(gate));
  if (rolled_back) return false;
  absl::Status pushed = AwaitPushes(&older_push_tickets_);
  pushed.Update(AwaitPushes(&push_tickets_));
  if (!pushed.ok()) {
    RETURN_IF_ERROR(Resync(pushed));
    return false;
  }
  if (prefetch_) prefetch_->Drop(params_.get());
  const int64_t generation = generation_;
  final_params_ = make_params_(cluster_, generation, /*fp32=*/true, [this, generation] {
    return leaving_ || *stop_ || gate_->generation() > generation;
  });
  const absl::Status read =
      final_params_->Wait(final_params_->Pull(total_, total_, &model_->weights()));
  if (!read.ok()) {
    RETURN_IF_ERROR(Resync(read));
    return false;
  }
  return true;
}

absl::StatusOr<double> ClockLoop::Run(const std::atomic<bool>& stop) {
  stop_ = &stop;
  window_start_ = absl::Now();
  while (true) {
    if (stop) return absl::CancelledError("interrupted");
    if (clock_ >= total_) {
      ASSIGN_OR_RETURN(const bool read, FinalRead());
      if (read) break;
      continue;
    }
    ASSIGN_OR_RETURN(const bool pulled, GateAndPull());
    if (!pulled) continue;
    ASSIGN_OR_RETURN(const bool pushed, ComputeAndPush());
    if (!pushed) continue;
    ++clock_;
  }
  ASSIGN_OR_RETURN(const double acc, data_->Evaluate(*model_));
  absl::MutexLock lock(&mu_);
  metrics_.test_accuracy = acc;
  metrics_.clock = total_;
  metrics_.bytes_in = params_->bytes_in() + final_params_->bytes_in();
  return acc;
}

}  // namespace pstrain
