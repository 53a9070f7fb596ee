#include "worker/external/external_worker.h"

#include <algorithm>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "common/daemon.h"
#include "common/dtype.h"
#include "common/grad_codec.h"
#include "common/job_optimizer.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/params.h"
#include "common/process_stats.h"
#include "common/stage_plan.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "worker/data/dataset.h"
#include "worker/device.h"
#include "worker/overlap.h"
#include "worker/param_client.h"
#include "worker/scheduler_gate.h"

namespace pstrain {

ExternalWorker::ExternalWorker(ExternalWorkerOptions options)
    : options_(std::move(options)), start_(absl::Now()) {}

absl::StatusOr<std::unique_ptr<ExternalWorker>> ExternalWorker::Open(
    ExternalWorkerOptions options) {
  DType wire = FP32;
  RETURN_IF_ERROR(CheckWorkerFlags(options.flags, &wire));
  options.member.role = WORKER;
  auto w = absl::WrapUnique(new ExternalWorker(std::move(options)));
  std::string note;
  // (0 threads: the OpenBLAS the script's PyTorch may share keeps its own
  // setting; this backend computes nothing.)
  ASSIGN_OR_RETURN(w->backend_, OpenDevice("cpu", 0, &note));
  w->ps_.wire_dtype = wire;  // (the job's instead, at registration, unless given)
  w->ps_.channels_per_server = static_cast<int>(w->options_.flags.channels_per_server);
  w->ps_.shm = w->options_.flags.shm;
  w->ps_.shm_doorbell = w->options_.flags.shm_doorbell;
  w->ps_.debug_hold_push = w->options_.flags.debug_hold_push;
  w->ps_.debug_delay_pull_param = w->options_.flags.debug_delay_pull_param;
  w->ps_.hyper = [self = w.get()](int64_t clock) { return self->hyper_.At(clock); };
  ExternalWorker* self = w.get();
  w->service_ = std::make_unique<WorkerService>([self] { return self->Status(); });
  int code = 0;
  ASSIGN_OR_RETURN(w->daemon_, MemberDaemon::Start(w->options_.member, {w->service_.get()}, &code));
  absl::MutexLock lock(&w->mu_);
  w->identity_.set_role(WORKER);
  w->identity_.set_id(-1);
  w->identity_.mutable_worker()->set_frontend(w->options_.frontend);
  w->identity_.mutable_worker()->set_compute_dtype("fp32");
  w->identity_.set_address(w->daemon_->address());
  return w;
}

ExternalWorker::~ExternalWorker() {
  if (!finished_) Finish(false, -1, "the worker was closed before it finished");
  if (daemon_ != nullptr) daemon_->Shutdown(absl::Seconds(1));
}

absl::Status ExternalWorker::Join() {
  if (id_ >= 0) return absl::FailedPreconditionError("this worker has joined already");
  RegisterRequest early;
  early.set_declare_later(true);
  int code = 0;
  ASSIGN_OR_RETURN(const RegisterResponse reg, daemon_->Register(&code, std::move(early)));
  job_ = reg.job();
  id_ = reg.id();
  {
    absl::MutexLock lock(&mu_);
    identity_.set_id(id_);
    identity_.mutable_worker()->set_replica(id_);
  }
  daemon_->StartHeartbeats([this] { return Status(); });
  spdlog::info("joined as worker {} of {}; the model is declared later", id_, job_.num_workers());
  return absl::OkStatus();
}

absl::Status ExternalWorker::Register(const std::vector<ParamSpec>& params, int64_t train_size,
                                      bool cuda) {
  if (declared_) return absl::FailedPreconditionError("this worker has registered already");
  const bool joined = id_ >= 0;
  RegisterRequest declared;
  for (const ParamSpec& p : params) *declared.add_params() = p;
  declared.set_train_size(train_size);
  if (joined) declared.set_id(id_);  // the same incarnation: its join's id again
  int code = 0;
  ASSIGN_OR_RETURN(const RegisterResponse reg, daemon_->Register(&code, std::move(declared)));
  job_ = reg.job();
  generation_ = reg.generation();
  start_clock_ = reg.start_clock();
  next_clock_ = start_clock_;
  if (options_.flags.wire_dtype.empty()) ps_.wire_dtype = job_.wire_dtype();
  ps_.compression = job_.compression();
  ps_.feedback = std::make_shared<ErrorFeedback>();  // every client of the run's
  if (CompressesPulls(job_.compression())) {
    ps_.held_views = std::make_shared<HeldViews>(job_.compression());
  }
  // As ps_worker on the parameters' device.
  // (Its reads are whole: a script's forward does not wait layer by layer.)
  overlap_ = DecideOverlap(options_.flags.overlap, job_, cuda, /*layered_reads=*/false,
                           /*loss_scaling=*/false);
  id_ = reg.id();
  declared_ = true;
  {
    absl::MutexLock lock(&mu_);
    identity_.set_id(id_);
    identity_.mutable_worker()->set_replica(id_);
    identity_.mutable_worker()->set_wire_dtype(DTypeName(ps_.wire_dtype));
    identity_.mutable_worker()->set_start_clock(start_clock_);
  }
  if (!joined) daemon_->StartHeartbeats([this] { return Status(); });
  spdlog::info("registered as worker {} of {}: {} parameters declared, {} training examples", id_,
               job_.num_workers(), params.size(), train_size);
  return absl::OkStatus();
}

absl::Status ExternalWorker::Start(const std::vector<const float*>& initial) {
  if (!declared_) return absl::FailedPreconditionError("register before starting");
  if (exchange_ != nullptr) return absl::FailedPreconditionError("the loop runs already");
  const std::vector<ParamInfo> params = ModelParams(job_.model());
  if (initial.size() != params.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(initial.size(), " initial tensors for ", params.size(), " parameters"));
  }
  partitions_ = std::make_unique<PlacedPartitions>(params, job_.chunk_bytes(), job_.num_servers());
  ASSIGN_OR_RETURN(const Partition* initial_placement, partitions_->For(ClusterMembers()));
  {
    absl::MutexLock lock(&servers_mu_);
    placed_ = initial_placement;
  }
  if (id_ == 0) {
    for (size_t i = 0; i < params.size(); ++i) {
      if (initial[i] == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("no initial values for ", params[i].name));
      }
      initial_.emplace_back(initial[i], initial[i] + params[i].numel);
    }
  }
  exchange_ = std::make_unique<ClockExchange>(static_cast<int>(params.size()));
  data_ = std::make_unique<ExternalData>(job_);
  model_ = std::make_unique<HandedModel>(job_.model(), backend_.get(), data_.get(), exchange_.get(),
                                         &initial_, read_by_layer_);
  loop_thread_ = std::thread([this] { RunLoop(); });
  watch_thread_ = std::thread([this] { Watch(); });
  return absl::OkStatus();
}

namespace {

// What the watch does to the loop: stops it (an external model has no
// pipeline links).
class StopLoop : public WatchActions {
 public:
  explicit StopLoop(std::atomic<bool>* stop) : stop_(stop) {}
  void Stop() override { *stop_ = true; }
  void InterruptLinks(int64_t) override {}
  void CancelLinks(const absl::Status&) override {}

 private:
  std::atomic<bool>* const stop_;
};

}  // namespace

void ExternalWorker::Watch() {
  StopLoop actions(&stop_);
  WorkerWatch watch(&actions);
  for (; !loop_over_; absl::SleepFor(absl::Milliseconds(50))) {
    WorkerNews news;
    news.job_state = daemon_->client().job_state();
    if (watch.Step(news)) {
      // The clock the caller may be computing ends the loop too.
      exchange_->Close(absl::AbortedError("the job was aborted"));
      return;
    }
  }
}

const Partition& ExternalWorker::PlacedNow() const {
  absl::MutexLock lock(&servers_mu_);
  return *placed_;
}

Placement ExternalWorker::PlacementNow() const {
  absl::MutexLock lock(&servers_mu_);
  return placement_;
}

ClockLoopOptions ExternalWorker::LoopOptions() const {
  ClockLoopOptions lo;
  lo.job = job_;
  lo.worker_id = id_;
  lo.replica = id_;
  lo.start_clock = start_clock_;
  lo.generation = generation_;
  lo.training.overlap = overlap_;
  lo.training.eval_each_epoch = false;  // the caller's to do
  lo.initial_values = [this]() -> absl::StatusOr<const ParamBuffers*> {
    if (initial_.empty()) return nullptr;
    if (!start_state_.empty()) {  // the optimizer's state first: a chunk takes it before its values
      RETURN_IF_ERROR(WriteOptimizerState(PlacedNow(), StateCallsNow(), start_state_));
    }
    return &initial_;
  };
  return lo;
}

void ExternalWorker::RunLoop() {
  SchedulerGate gate(&daemon_->client());
  auto make_params = [this](const ClusterMembers& cluster, int64_t generation, bool fp32,
                            std::function<bool()> abandon) -> std::unique_ptr<ParamClient> {
    const Partition* placed = PlacedOrLogged(*partitions_, cluster);
    {
      std::vector<std::string> servers;
      for (const Member& m : cluster.servers()) servers.push_back(m.address());
      absl::MutexLock lock(&servers_mu_);
      servers_ = std::move(servers);
      placed_ = placed;
      placement_ = cluster.placement();
    }
    return std::make_unique<AsyncPsClient>(
        cluster, placed, id_,
        ps_.ForGeneration(generation, fp32, std::move(abandon), job_.standby_copies(),
                          [client = &daemon_->client()] { return client->routes(); }));
  };
  ClockLoop loop(LoopOptions(), &gate, make_params, data_.get(), model_.get(), backend_.get());
  {
    absl::MutexLock lock(&mu_);
    loop_ = &loop;
  }
  absl::StatusOr<double> ran =
      OutOfMemoryAsError("while training", [&] { return loop.Run(stop_); });
  loop_over_ = true;
  std::string message;
  if (!ran.ok() && daemon_->client().job_state(&message) == ABORTED) {
    ran = absl::AbortedError(absl::StrCat("the job was aborted: ", message));
  }
  {
    absl::MutexLock lock(&mu_);
    last_ = loop.metrics();
    loop_ = nullptr;
    loop_done_ = ran.ok();
  }
  if (!ran.ok() && !absl::IsCancelled(ran.status())) {
    spdlog::error("training stopped: {}", ran.status().message());
  }
  exchange_->End(ran.status());
}

absl::StatusOr<std::optional<ClockExchange::OfferedClock>> ExternalWorker::Next(
    absl::Duration timeout) {
  if (exchange_ == nullptr) return absl::FailedPreconditionError("the loop has not started");
  absl::StatusOr<std::optional<ClockExchange::OfferedClock>> next = exchange_->Await(timeout);
  if (next.ok() && next->has_value()) {
    under_way_ = **next;
    {
      // The loop waits for this clock: its generation is the clock's.
      absl::MutexLock lock(&mu_);
      under_way_generation_ = loop_ != nullptr ? loop_->metrics().generation : generation_;
    }
    under_way_void_ = false;
    tables_pushed_.clear();
    // A clock that ended in an error may have left table pushes under way.
    for (std::future<absl::Status>& push : row_pushes_) push.wait();
    row_pushes_.clear();
  }
  return next;
}

absl::Status ExternalWorker::ReadByLayer(bool on) {
  if (exchange_ != nullptr) return absl::FailedPreconditionError("the loop runs already");
  read_by_layer_ = on;
  return absl::OkStatus();
}

absl::Status ExternalWorker::AwaitWeights(int param) {
  if (model_ == nullptr || !under_way_.has_value()) {
    return absl::FailedPreconditionError("no clock under way");
  }
  return model_->AwaitWeightsOf(param);
}

float* ExternalWorker::weights(int i) {
  if (model_ == nullptr || i < 0 || i >= static_cast<int>(model_->weights().size())) {
    return nullptr;
  }
  return model_->weights()[i].data();
}

float* ExternalWorker::grads(int i) {
  if (model_ == nullptr || i < 0 || i >= static_cast<int>(model_->grads().size())) return nullptr;
  return model_->mutable_grads()[i].data();
}

absl::Status ExternalWorker::GradsReady(int param) {
  if (exchange_ == nullptr) return absl::FailedPreconditionError("the loop has not started");
  return exchange_->GradsReady(param);
}

absl::Status ExternalWorker::GradsAt(int param, const float* values) {
  if (exchange_ == nullptr) return absl::FailedPreconditionError("the loop has not started");
  return exchange_->GradsAt(param, values);
}

absl::Status ExternalWorker::GradsAbsent(int param) {
  if (exchange_ == nullptr) return absl::FailedPreconditionError("the loop has not started");
  return exchange_->GradsAbsent(param);
}

absl::Status ExternalWorker::ClockDone(const StepResult& result) {
  if (exchange_ == nullptr) return absl::FailedPreconditionError("the loop has not started");
  if (under_way_.has_value()) {
    for (const TableSpec& t : job_.tables()) {
      if (tables_pushed_.count(t.name()) > 0) continue;
      // The clock's read guarantee first, as a pull of the table would have
      // waited for it: under BSP a push of this clock is refused while the
      // worker's push of the clock before still waits in an open round.
      std::vector<float> none;
      RETURN_IF_ERROR(PullRows(t.name(), t.width(), {}, &none));
      RETURN_IF_ERROR(PushRows(t.name(), t.width(), {}, {}));
    }
    RETURN_IF_ERROR(AwaitRowPushes());
  }
  RETURN_IF_ERROR(exchange_->ClockDone(result));
  if (under_way_.has_value()) next_clock_ = under_way_->clock + 1;
  under_way_.reset();
  return absl::OkStatus();
}

std::vector<std::string> ExternalWorker::servers() const {
  absl::MutexLock lock(&servers_mu_);
  return servers_;
}

absl::Status ExternalWorker::SetHyper(const std::string& json) {
  if (!under_way_.has_value()) {
    return absl::FailedPreconditionError("hyperparameters are set during a clock");
  }
  OptimizerSpec hyper;
  if (!json.empty()) {
    const auto parsed = google::protobuf::util::JsonStringToMessage(json, &hyper);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("hyperparameters ", json, ": ", parsed.message().as_string()));
    }
  }
  RETURN_IF_ERROR(WithHyper(job_.optimizer(), hyper).status());
  hyper_.Set(under_way_->clock, hyper.ByteSizeLong() == 0 ? "" : hyper.SerializeAsString());
  return absl::OkStatus();
}

absl::Status ExternalWorker::ReadState() {
  if (partitions_ == nullptr) return absl::FailedPreconditionError("start before reading state");
  // Within a clock offered before its weights (read by layer), the state of
  // the weights it reads is there once they all are: the round before is
  // applied on every chunk. (A failed pull: the clock is lost anyway.)
  if (model_ != nullptr && under_way_.has_value()) {
    for (size_t p = 0; p < model_->params().size(); ++p) {
      (void)model_->AwaitWeightsOf(static_cast<int>(p));
    }
  }
  ASSIGN_OR_RETURN(state_,
                   ReadOptimizerState(PlacedNow(), ModelParams(job_.model()), StateCallsNow()));
  return absl::OkStatus();
}

absl::Status ExternalWorker::SetStartState(int param, int64_t steps,
                                           std::vector<std::vector<float>> arrays) {
  if (exchange_ != nullptr)
    return absl::FailedPreconditionError("the optimizer state goes before the start");
  const std::vector<ParamInfo> params = ModelParams(job_.model());
  if (param < 0 || param >= static_cast<int>(params.size()) || steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat("seed: parameter ", param, ", steps ", steps));
  }
  for (const std::vector<float>& array : arrays) {
    if (static_cast<int64_t>(array.size()) != params[param].numel) {
      return absl::InvalidArgumentError(absl::StrCat("seed: ", params[param].name, " has ",
                                                     params[param].numel, " values, an array ",
                                                     array.size()));
    }
  }
  start_state_.resize(params.size());
  start_state_[param] = ParamState{steps, std::move(arrays)};
  return absl::OkStatus();
}

void ExternalWorker::Finish(bool ok, double accuracy, const std::string& message) {
  if (finished_) return;
  finished_ = true;
  bool done;
  {
    absl::MutexLock lock(&mu_);
    done = loop_done_;
  }
  std::string why = message;
  if (ok && !done && id_ >= 0) {
    ok = false;
    why = "the script ended before the job's clocks were done";
  }
  // The loop ends at its next clock or retry; a gate call it waits in is
  // answered once the scheduler knows this worker is gone.
  stop_ = true;
  if (exchange_ != nullptr) exchange_->Close(absl::CancelledError(why));
  if (id_ >= 0) {
    MemberStatus st = Status();
    if (accuracy >= 0) st.mutable_worker()->set_test_accuracy(accuracy);
    daemon_->ReportFinal(st, ok ? FINISHED : FAILED, why);
  }
  if (loop_thread_.joinable()) loop_thread_.join();
  if (watch_thread_.joinable()) watch_thread_.join();
}

MemberStatus ExternalWorker::Status() {
  absl::MutexLock lock(&mu_);
  MemberStatus st = identity_;
  st.set_uptime_s(absl::ToDoubleSeconds(absl::Now() - start_));
  st.set_rss_bytes(ResidentBytes());
  SetLoopStatus(loop_ != nullptr ? loop_->metrics() : last_, &st);
  st.set_state(RUNNING);
  return st;
}

}  // namespace pstrain
