#include "worker/clock_loop.h"

#include <algorithm>
#include <cmath>
#include <future>
#include <utility>

#include "absl/time/clock.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

// A replacement starts one or two clocks behind its predecessor's place
// (AdvanceClockRequest.pushed_clock): the clocks whose pushes may have
// landed in part.
constexpr int64_t kRedoClocks = 2;

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
      gate_(gate),
      make_params_(std::move(params)),
      data_(data),
      model_(model),
      backend_(backend),
      member_(options_.job, options_.replica, options_.stages, options_.generation, this),
      reads_(&member_.schedule(), options_.training.overlap, std::max(1, options_.stages)),
      stats_(absl::Now()),
      // The loss is known to worker 0, or the last stage of replica 0.
      progress_(options_.job, options_.worker_id == std::max(1, options_.stages) - 1,
                options_.replica == 0 && options_.training.eval_each_epoch, data_, &stats_),
      clock_(options_.start_clock),
      pushed_through_(options_.start_clock),
      arrivals_(static_cast<int>(model->params().size())) {
  // Under SSP and ASP the next clock's weights come while this one computes.
  if (options_.training.overlap && EverStale(options_.job)) {
    prefetch_.emplace(model_->params(), backend_);
  }
  if (options_.training.overlap) {
    model_->set_grads_ready([this](const std::vector<int>& params) {
      push_tickets_.push_back(params_->Push(clock_, batch_.rows, &model_->grads(), 0.0f, params,
                                            model_->grads_absent(), model_->grads_at()));
    });
    // Under BSP the forward of a layer waits for that layer's weights only.
    if (!options_.stage_step) {
      model_->set_weights_await([this](const std::vector<int>& p) { return arrivals_.Await(p); });
    }
  }
  absl::MutexLock lock(&mu_);
  metrics_.generation = options_.generation;
}

ClockLoop::~ClockLoop() {
  leaving_ = true;
  model_->set_grads_ready(nullptr);
  model_->set_weights_await(nullptr);
}

ClockMetrics ClockLoop::metrics() const {
  absl::MutexLock lock(&mu_);
  return metrics_;
}

absl::Status ClockLoop::Connect(const ClusterMembers& cluster) {
  if (cluster.servers_size() < options_.job.num_servers()) {  // (more: servers that joined)
    return absl::FailedPreconditionError("the scheduler's members lack servers");
  }
  // Calls of an older generation end first (abandoned at their next retry).
  if (prefetch_ && params_ != nullptr) prefetch_->Drop(params_.get());
  DropLanding();
  arrivals_.Forget();  // a pull of the old client's left unread
  for (auto* tickets : {&older_push_tickets_, &push_tickets_}) {
    for (ParamTicket t : *tickets) (void)params_->Wait(t);
    tickets->clear();
  }
  if (params_ != nullptr) stats_.Retire(*params_);
  params_.reset();
  reads_.Forget();  // weights of another generation
  cluster_ = cluster;
  const int64_t generation = member_.generation();
  params_ = make_params_(cluster_, generation, /*fp32=*/false, [this, generation] {
    return leaving_ || (stop_ != nullptr && *stop_) || member_.generation() > generation ||
           gate_->generation() > generation;
  });
  if (options_.initial_values && clock_ == 0) {
    ASSIGN_OR_RETURN(const ParamBuffers* initial, options_.initial_values());
    if (initial != nullptr) RETURN_IF_ERROR(params_->Wait(params_->PushInitialValues(initial)));
  }
  return options_.on_cluster ? options_.on_cluster(cluster, member_.link_generation())
                             : absl::OkStatus();
}

absl::Status ClockLoop::Relink(const ClusterMembers& cluster, int64_t link_generation) {
  return options_.on_cluster(cluster, link_generation);
}

void ClockLoop::ResumeAt(int64_t clock) {
  clock_ = clock;
  // A rollback's servers hold every push before `clock`; a pipeline
  // restart's hold what they held (the pushes of the clock before may still
  // be on their way): never more than what was known, never past `clock`.
  pushed_through_ = std::min(pushed_through_, clock);
  absl::MutexLock lock(&mu_);
  metrics_.generation = member_.generation();
  metrics_.clock = clock_;  // heartbeats say where it is now (a scheduler may catch up from it)
}

void ClockLoop::SetPushContext(const PushContext& context) { params_->SetPushContext(context); }

absl::StatusOr<AdvanceClockResponse> ClockLoop::CallGate(int64_t clock, bool relink) {
  return gate_->AdvanceClock(GateRequest(clock, relink));
}

std::future<absl::StatusOr<AdvanceClockResponse>> ClockLoop::CallGateAsync(int64_t clock) {
  return gate_->AdvanceClockAsync(GateRequest(clock, false));
}

AdvanceClockRequest ClockLoop::GateRequest(int64_t clock, bool relink) {
  if (gate_->remote()) stats_.CountGateCall();
  AdvanceClockRequest req;
  req.set_worker_id(options_.worker_id);
  req.set_clock(clock);
  req.set_generation(member_.generation());
  req.set_link_generation(member_.link_generation());
  req.set_relink(relink);
  req.set_pushed_clock(std::min(pushed_through_, clock));
  return req;
}

absl::StatusOr<bool> ClockLoop::Adopt(const AdvanceClockResponse& gate) {
  return member_.Adopt(gate, clock_, /*connected=*/params_ != nullptr);
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
  if (gate.generation() == member_.generation()) return failure;
  return Adopt(gate).status();
}

absl::Status ClockLoop::RelinkAfter(const absl::Status& failure) {
  if (*stop_) return absl::CancelledError("interrupted");
  if (!WorkerMemberLoop::MayRelink(failure)) return failure;
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
  const bool connected = params_ != nullptr;
  const bool prefetched = connected && prefetch_ && prefetch_->Has(clock_);
  if (connected && prefetch_ && !prefetched) prefetch_->Drop(params_.get());
  const WeightSource source = reads_.Source(clock_, connected, prefetched);
  std::optional<ParamTicket> ticket;
  if (source == WeightSource::kPullWithGate) ticket = Pull(/*layered=*/Layered());
  const int64_t pull_clock = clock_;
  const bool awaits_gate = reads_.AwaitsGate(connected);
  ASSIGN_OR_RETURN(const bool moved, TakePendingGate());
  if (moved) return false;
  const absl::Time taken_at = absl::Now();
  // The gate answers while the pushes of the clock before last finish: the
  // step writes the gradient set they read (Model::FlipGrads). The last
  // clock's go on (a pull of BSP's waits for them at the servers).
  std::future<absl::StatusOr<AdvanceClockResponse>> answer = CallGateAsync(clock_);
  absl::Status pushed = AwaitPushes(&older_push_tickets_);  // the clock before last's
  if (pushed.ok()) pushed_through_ = std::max(pushed_through_, clock_ - 1);
  older_push_tickets_ = std::move(push_tickets_);
  push_tickets_.clear();
  const absl::Time pushed_at = absl::Now();
  if (!awaits_gate) {
    pending_gate_ = std::move(answer);
  } else {
    ASSIGN_OR_RETURN(const AdvanceClockResponse gate, answer.get());
    ASSIGN_OR_RETURN(const bool sent_elsewhere, Adopt(gate));
    if (sent_elsewhere || clock_ >= member_.total()) return false;  // (or the job drained)
  }
  const absl::Time gated_at = absl::Now();
  if (!pushed.ok()) {
    RETURN_IF_ERROR(Resync(pushed));
    return false;
  }
  if (const absl::Status read = Read(source, ticket, pull_clock); !read.ok()) {
    RETURN_IF_ERROR(Resync(read));
    return false;
  }
  ASSIGN_OR_RETURN(const bool rolled_back, RedoExactly());
  if (rolled_back) return false;
  // A gate answer already here is taken now, so that the step computes the
  // share the live workers it names give this one (a worker declared dead
  // is known to the scheduler before the servers close its BSP round).
  if (pending_gate_.valid() &&
      pending_gate_.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
    ASSIGN_OR_RETURN(const bool moved, TakePendingGate());
    if (moved || clock_ >= member_.total()) {
      DropLanding();
      return false;
    }
  }
  const absl::Duration gate = (taken_at - t0) + (gated_at - pushed_at);
  const absl::Duration pushing = pushed_at - taken_at, pulling = absl::Now() - gated_at;
  stats_.clock().gate += gate;
  stats_.clock().push += pushing;
  stats_.clock().pull += pulling;
  Latencies& latencies = ProcessLatencies();
  latencies.gate_wait.Observe(gate);
  latencies.push.Observe(pushing);
  latencies.pull.Observe(pulling);
  if (prefetch_ && clock_ + 1 < member_.total() && reads_.Prefetches(clock_ + 1)) {
    const ConsistencySchedule& schedule = member_.schedule();
    prefetch_->Start(params_.get(), clock_ + 1, schedule.MinClockForRead(clock_ + 1));
  }
  return true;
}

bool ClockLoop::Layered() const {
  return options_.training.overlap && !options_.stage_step &&
         clock_ >= options_.start_clock + kRedoClocks;
}

absl::StatusOr<bool> ClockLoop::RedoExactly() {
  if (clock_ == inexact_redo_ || !read_clocks_.RedoIsInexact(clock_) ||
      member_.schedule().ConsistencyAt(clock_) != BSP) {
    return false;
  }
  spdlog::warn("clock {}: this replacement's predecessor pushed it to some chunks (applied there) "
               "and not to others; asking for a rollback to the last checkpoint, so that it is "
               "not made again from newer weights",
               clock_);
  ASSIGN_OR_RETURN(const bool moved, TakePendingGate());
  if (moved) return true;
  AdvanceClockRequest req = GateRequest(clock_, /*relink=*/false);
  req.set_redo_inexact(true);
  ASSIGN_OR_RETURN(const AdvanceClockResponse gate, gate_->AdvanceClock(req));
  ASSIGN_OR_RETURN(const bool rolled_back, Adopt(gate));
  if (!rolled_back) {
    spdlog::warn("clock {}: no checkpoint to roll back to; redoing it from the weights read",
                 clock_);
    inexact_redo_ = clock_;
  }
  return rolled_back;
}

ParamTicket ClockLoop::Pull(bool layered) {
  model_->FlipWeights();  // (a model with two sets: the other one is written)
  return params_->Pull(clock_, member_.schedule().MinClockForRead(clock_), &model_->weights(),
                       &read_clocks_, layered ? &arrivals_ : nullptr);
}

absl::Status ClockLoop::Read(WeightSource source, std::optional<ParamTicket> ticket,
                             int64_t pull_clock) {
  // Weights from anywhere but a layered pull are whole when the step starts.
  if (source != WeightSource::kPullWithGate || !Layered()) arrivals_.Forget();
  absl::Status read;
  switch (source) {
    case WeightSource::kCache:
      return absl::OkStatus();
    case WeightSource::kPrefetch:
      model_->FlipWeights();
      read = prefetch_->Take(params_.get(), pull_clock, &model_->weights(), &read_clocks_);
      break;
    case WeightSource::kPullWithGate:
      if (Layered()) {  // the step's forward waits for each layer's weights
        landing_ = *ticket;
        return absl::OkStatus();
      }
      read = params_->Wait(*ticket);
      break;
    case WeightSource::kPullAfterGate:
      read = params_->Wait(Pull(/*layered=*/false));
      break;
  }
  if (!read.ok()) return read;
  NoteRead();
  return absl::OkStatus();
}

void ClockLoop::NoteRead() {
  {
    absl::MutexLock lock(&mu_);
    ++metrics_.pulls;
  }
  // The weights read hold this worker's pushes of the iterations below
  // its applied clock (under BSP: every iteration before this one).
  const std::vector<int64_t>& applied = read_clocks_.applied;
  if (options_.worker_id < static_cast<int>(applied.size())) {
    pushed_through_ = std::max(pushed_through_, applied[options_.worker_id]);
  }
  reads_.Note(applied, member_.live());
}

void ClockLoop::DropLanding() {
  if (landing_) (void)params_->Wait(*std::exchange(landing_, std::nullopt));
}

absl::Status ClockLoop::FinishLanding() {
  if (!landing_) return absl::OkStatus();
  RETURN_IF_ERROR(params_->Wait(*std::exchange(landing_, std::nullopt)));
  NoteRead();
  return absl::OkStatus();
}

absl::StatusOr<StepResult> ClockLoop::Compute() {
  if (options_.stage_step) {
    ASSIGN_OR_RETURN(const StageClock s, options_.stage_step(clock_, batch_, &accumulated_.sum()));
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
  return accumulated_.Train(*model_, batch_, k);
}

void ClockLoop::Push(bool finite) {
  if (options_.training.overlap) return;  // the layers' pushes went out during the backward
  ParamBuffers& grads = Accumulates() ? accumulated_.sum() : model_->mutable_grads();
  const float norm = options_.job.optimizer().clip_norm() > 0 && finite ? GlobalNorm(grads) : 0.0f;
  push_tickets_.push_back(
      params_->Push(clock_, batch_.rows, &grads, norm, {}, model_->grads_absent(), {}));
}

absl::Status ClockLoop::AwaitPushes(std::vector<ParamTicket>* tickets) {
  absl::Status first;
  for (ParamTicket t : *tickets) first.Update(params_->Wait(t));
  tickets->clear();
  return first;
}

absl::StatusOr<bool> ClockLoop::ComputeAndPush() {
  const absl::Time t2 = absl::Now();
  const absl::Duration delay =
      StragglerDelay(options_.training.straggler, options_.worker_id, clock_);
  if (delay > absl::ZeroDuration()) absl::SleepFor(delay);
  // The clock's global batch split among the live replicas: this one's rows.
  int num_shares, share_index;
  RETURN_IF_ERROR(member_.BatchShare(&num_shares, &share_index));
  data_->NextBatch(clock_, num_shares, share_index, &batch_);
  if (Accumulates()) {
    // One buffer of summed gradients: the last clock's pushes read it.
    if (const absl::Status pushed = AwaitPushes(&older_push_tickets_); !pushed.ok()) {
      RETURN_IF_ERROR(Resync(pushed));
      return false;
    }
    pushed_through_ = std::max(pushed_through_, clock_);
  } else {
    model_->FlipGrads();
  }
  if (options_.training.loss_scaling) model_->set_loss_scale(scaler_.scale());
  const absl::StatusOr<StepResult> stepped = Compute();
  // The layered pull's wait inside the forward counts as pulling.
  const absl::Duration landing = arrivals_.TakeWaited();
  stats_.clock().pull += landing;
  if (const absl::Status read = FinishLanding(); !read.ok()) {
    RETURN_IF_ERROR(Resync(read));
    return false;
  }
  if (!stepped.ok() && options_.stage_step) {
    RETURN_IF_ERROR(RelinkAfter(stepped.status()));
    return false;
  }
  RETURN_IF_ERROR(stepped.status());
  const StepResult& step = *stepped;
  // An fp16 overflow skips the step: the push carries the non-finite
  // gradient, which every server counts and does not apply (a BSP round
  // closes over the other workers' samples).
  ParamBuffers& grads = Accumulates() ? accumulated_.sum() : model_->mutable_grads();
  const bool finite = !options_.training.loss_scaling || scaler_.Unscale(&grads);
  // The push goes on while the next clock's gate call does (see GateAndPull).
  Push(finite);
  stats_.clock().compute += absl::Now() - t2 - landing;
  RETURN_IF_ERROR(AfterClock(step));
  return true;
}

absl::Status ClockLoop::AfterClock(const StepResult& step) {
  const std::optional<RunFigures> run = stats_.EndClock(step.loss, TrafficSoFar(), absl::Now());
  {
    absl::MutexLock lock(&mu_);
    if (run.has_value()) {
      metrics_.train_s = run->train_s;
      metrics_.clocks_trained = run->clocks;
      metrics_.run = run->split;
    }
    metrics_.clock = clock_ + 1;
    metrics_.loss = stats_.recent_loss();
    metrics_.peak_device_bytes = backend_->peak_bytes();
    if (std::string path = backend_->attention_path(); path != metrics_.attention_path) {
      spdlog::info("attention: {}", path);
      metrics_.attention_path = std::move(path);
    }
    metrics_.loss_scale = options_.training.loss_scaling ? scaler_.scale() : 1.0;
    metrics_.skipped_steps = scaler_.overflows();
    metrics_.bytes_in = params_->bytes_in();
    metrics_.bytes_out = params_->bytes_out();
    metrics_.shm_bytes = params_->shm_bytes();
    metrics_.shm_segments = params_->shm_segments();
    metrics_.shm_rings = params_->shm_rings();
    ++metrics_.pushes;
  }
  ASSIGN_OR_RETURN(const ProgressNews news,
                   progress_.AfterClock(clock_, member_.total(), TrafficSoFar(), *model_));
  absl::MutexLock lock(&mu_);
  if (news.window.has_value()) {
    metrics_.samples_per_s = news.window->samples_per_s;
    metrics_.window = news.window->split;
  }
  if (news.accuracy.has_value()) metrics_.test_accuracy = *news.accuracy;
  return absl::OkStatus();
}

absl::StatusOr<bool> ClockLoop::FinalRead() {
  // Report the last clock, then read every worker's every update. The
  // final read is of the fp32 master weights whatever the wire dtype: they
  // are what the job trained (and what --weights_out writes).
  ASSIGN_OR_RETURN(const bool moved, TakePendingGate());
  if (moved) return false;
  ASSIGN_OR_RETURN(const AdvanceClockResponse gate, CallGate(member_.total()));
  ASSIGN_OR_RETURN(const bool rolled_back, Adopt(gate));
  if (rolled_back) return false;
  absl::Status pushed = AwaitPushes(&older_push_tickets_);
  pushed.Update(AwaitPushes(&push_tickets_));
  if (!pushed.ok()) {
    RETURN_IF_ERROR(Resync(pushed));
    return false;
  }
  pushed_through_ = clock_;
  if (prefetch_) prefetch_->Drop(params_.get());
  arrivals_.Forget();  // the final read is whole
  const int64_t generation = member_.generation();
  final_params_ = make_params_(cluster_, generation, /*fp32=*/true, [this, generation] {
    return leaving_ || *stop_ || gate_->generation() > generation;
  });
  model_->FlipWeights();
  const absl::Status read = final_params_->Wait(
      final_params_->Pull(member_.total(), member_.total(), &model_->weights()));
  if (!read.ok()) {
    RETURN_IF_ERROR(Resync(read));
    return false;
  }
  return true;
}

absl::StatusOr<double> ClockLoop::Run(const std::atomic<bool>& stop) {
  stop_ = &stop;
  while (true) {
    if (stop) return absl::CancelledError("interrupted");
    if (clock_ >= member_.total()) {
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
  metrics_.clock = member_.total();
  metrics_.bytes_in = params_->bytes_in() + final_params_->bytes_in();
  return acc;
}

}  // namespace pstrain
