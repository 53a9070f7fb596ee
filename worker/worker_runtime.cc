#include "worker/worker_runtime.h"

#include <atomic>
#include <fstream>
#include <functional>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/daemon.h"
#include "common/dtype.h"
#include "common/grad_codec.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/status_json.h"
#include "common/status_macros.h"
#include "worker/data/dataset.h"
#include "worker/device.h"
#include "worker/member_loop.h"
#include "worker/overlap.h"
#include "worker/stage_link.h"
#include "worker/standalone/standalone.h"
#include "worker/trainer.h"
#include "worker/worker_service.h"

namespace pstrain {
namespace {

// The command line's choices, checked before the worker joins.
absl::Status CheckConfig(const WorkerConfig& c, kernels::Precision* precision, DType* wire) {
  auto bad = [](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  RETURN_IF_ERROR(CheckWorkerFlags(c.flags, wire));
  if (c.recompute != "none" && c.recompute != "block") {
    return bad("--recompute=", c.recompute, ": expected none or block");
  }
  if (c.compute_dtype == "fp32") {
    *precision = kernels::Precision::kFp32;
  } else if (c.compute_dtype == "bf16") {
    *precision = kernels::Precision::kBf16;
  } else if (c.compute_dtype == "fp16") {
    *precision = kernels::Precision::kFp16;
  } else {
    return bad("--compute_dtype=", c.compute_dtype, ": expected fp32, bf16 or fp16");
  }
  if (c.tf32 && c.compute_dtype != "fp32") {
    return bad("--tf32 is for --compute_dtype=fp32, not ", c.compute_dtype);
  }
  if (c.attention != "auto" && c.attention != "own") {
    return bad("--attention=", c.attention, ": expected auto or own");
  }
  if (c.training.device_memory_budget < 0) return bad("--device_memory_budget must be >= 0");
  return absl::OkStatus();
}

// The device, computing in `precision`: a worker that cannot compute says
// so before it joins.
absl::StatusOr<std::unique_ptr<kernels::Backend>> OpenBackend(const WorkerConfig& c,
                                                              kernels::Precision precision) {
  std::string note;
  ASSIGN_OR_RETURN(std::unique_ptr<kernels::Backend> backend,
                   OpenDevice(c.device, c.compute_threads, &note));
  if (std::string why; !backend->SetPrecision(precision, &why)) {
    return absl::InvalidArgumentError(absl::StrCat("--compute_dtype=", c.compute_dtype, ": ", why));
  }
  if (std::string why; !backend->AllowTf32(c.tf32, &why)) {
    return absl::InvalidArgumentError(absl::StrCat("--tf32: ", why));
  }
  backend->SetAttentionLibrary(c.attention == "own" ? kernels::AttentionLibrary::kOwn
                                                    : kernels::AttentionLibrary::kAuto);
  spdlog::info("computing on {} in {}{}", note, c.compute_dtype,
               c.tf32 ? " (products on TF32 tensor cores)" : "");
  return backend;
}

// The runtime as WorkerWatch acts on it: `stop` ends the training, the
// links are the trainer's running stage's.
class RuntimeActions : public WatchActions {
 public:
  RuntimeActions(std::atomic<bool>* stop, Trainer* trainer) : stop_(stop), trainer_(trainer) {}
  void Stop() override { *stop_ = true; }
  void InterruptLinks(int64_t link_generation) override {
    trainer_->InterruptLinks(link_generation);
  }
  void CancelLinks(const absl::Status& why) override { trainer_->CancelLinks(why); }

 private:
  std::atomic<bool>* const stop_;
  Trainer* const trainer_;
};

// A thread that polls `news` every 50 ms through a WorkerWatch until `stop`
// (set by the watch itself, or by the caller once training ended). All
// outlive the thread (the caller joins it).
std::thread Watch(std::atomic<bool>* stop, Trainer* trainer, std::function<WorkerNews()> news) {
  return std::thread([stop, trainer, news = std::move(news)] {
    RuntimeActions actions(stop, trainer);
    WorkerWatch watch(&actions);
    for (; !*stop; absl::SleepFor(absl::Milliseconds(50))) {
      if (watch.Step(news())) return;
    }
  });
}

// What the trainer is told, from the command line, the registration and
// the job.
absl::StatusOr<TrainerOptions> TrainerOptionsFor(const WorkerConfig& config,
                                                 const std::string& device, DType wire,
                                                 StageLinkService* stage_link,
                                                 const RegisterResponse& reg, const JobSpec& job);

// One worker's life after it registered.
class WorkerMember {
 public:
  WorkerMember(const WorkerConfig& config, kernels::Backend* backend, DType wire,
               StageLinkService* stage_link)
      : config_(config), backend_(backend), wire_(wire), stage_link_(stage_link) {}
  // The daemon it runs in (the Status service may ask before).
  void Attach(MemberDaemon* daemon) {
    absl::MutexLock lock(&mu_);
    daemon_ = daemon;
  }

  // Its status for heartbeats and the Status service.
  MemberStatus Status();
  int Run(const RegisterResponse& reg);

 private:
  absl::StatusOr<TrainerOptions> Options(const RegisterResponse& reg, const JobSpec& job) const;
  // Trains until the job ends or the process is told to stop.
  int Train();
  // Every way out reports to the scheduler, so the job never waits on a
  // worker that is gone.
  void Report(MemberState state, const std::string& message, double accuracy = -1);

  const WorkerConfig& config_;
  kernels::Backend* backend_;
  const DType wire_;
  StageLinkService* const stage_link_;
  absl::Mutex mu_;
  MemberDaemon* daemon_ ABSL_GUARDED_BY(mu_) = nullptr;
  int id_ ABSL_GUARDED_BY(mu_) = -1;
  std::unique_ptr<Trainer> trainer_ ABSL_GUARDED_BY(mu_);
};

MemberStatus WorkerMember::Status() {
  absl::MutexLock lock(&mu_);
  MemberStatus st;
  if (trainer_ != nullptr) st = trainer_->Status();
  st.set_role(WORKER);
  st.set_id(id_);
  if (daemon_ != nullptr) st.set_address(daemon_->address());
  st.mutable_worker()->set_compute_dtype(config_.compute_dtype);
  st.mutable_worker()->set_tf32(config_.tf32);
  if (st.state() == MEMBER_STATE_UNSPECIFIED) st.set_state(RUNNING);
  return st;
}

void WorkerMember::Report(MemberState state, const std::string& message, double accuracy) {
  MemberStatus st = Status();
  if (accuracy >= 0) st.mutable_worker()->set_test_accuracy(accuracy);
  MemberDaemon* daemon;
  {
    absl::MutexLock lock(&mu_);
    daemon = daemon_;
  }
  daemon->ReportFinal(st, state, message);
}

absl::StatusOr<TrainerOptions> WorkerMember::Options(const RegisterResponse& reg,
                                                     const JobSpec& job) const {
  return TrainerOptionsFor(config_, backend_->name(), wire_, stage_link_, reg, job);
}

absl::StatusOr<TrainerOptions> TrainerOptionsFor(const WorkerConfig& config,
                                                 const std::string& device, DType wire,
                                                 StageLinkService* stage_link,
                                                 const RegisterResponse& reg, const JobSpec& job) {
  TrainerOptions topts;
  topts.worker_id = reg.id();
  topts.job = job;
  topts.training = config.training;
  topts.training.recompute = config.recompute == "block";
  topts.training.loss_scaling = config.compute_dtype == "fp16";
  std::string why_not;
  topts.training.overlap =
      DecideOverlap(config.flags.overlap, job, device == "cuda", /*layered_reads=*/true,
                    topts.training.loss_scaling, &why_not);
  if (!why_not.empty()) {
    spdlog::info("--overlap is off for this job: a clock needs its whole gradient first ({})",
                 why_not);
  }
  if (topts.training.loss_scaling && job.optimizer().allow_nonfinite()) {
    return absl::FailedPreconditionError(
        "--compute_dtype=fp16 skips overflowing steps through the servers' refusal of "
        "non-finite gradients, which this job turns off (optimizer.allow_nonfinite)");
  }
  topts.ps.wire_dtype = config.flags.wire_dtype.empty() ? job.wire_dtype() : wire;
  topts.ps.compression = job.compression();
  topts.ps.feedback = std::make_shared<ErrorFeedback>();  // every client of the run's
  if (CompressesPulls(job.compression())) {
    topts.ps.held_views = std::make_shared<HeldViews>(job.compression());
  }
  topts.ps.channels_per_server = static_cast<int>(config.flags.channels_per_server);
  topts.ps.shm = config.flags.shm;
  topts.ps.shm_doorbell = config.flags.shm_doorbell;
  topts.ps.debug_hold_push = config.flags.debug_hold_push;
  topts.ps.debug_delay_pull_param = config.flags.debug_delay_pull_param;
  topts.generation = reg.generation();
  topts.start_clock = reg.start_clock();
  topts.stage_link = stage_link;
  return topts;
}

int WorkerMember::Run(const RegisterResponse& reg) {
  MemberDaemon* daemon;
  {
    absl::MutexLock lock(&mu_);
    id_ = reg.id();
    daemon = daemon_;
  }
  JobSpec job = reg.job();
  if (!config_.data_dir.empty()) job.mutable_data()->set_path(config_.data_dir);
  // Heartbeats from now on: loading the data may take longer than the
  // scheduler's heartbeat timeout.
  daemon->StartHeartbeats([this] { return Status(); });
  absl::StatusOr<TrainTest> data =
      OutOfMemoryAsError("loading the data set", [&] { return LoadDataset(job); });
  if (!data.ok()) {
    spdlog::error("cannot load the data set: {}", data.status().message());
    Report(FAILED, absl::StrCat("data: ", data.status().message()));
    return 1;
  }
  spdlog::info("data: {} training and {} test examples of {} features", data->train.size,
               data->test.size, data->train.dim);
  absl::StatusOr<TrainerOptions> topts = Options(reg, job);
  if (!topts.ok()) {
    spdlog::error("{}", topts.status().message());
    Report(FAILED, "fp16 compute with allow_nonfinite");
    return 2;
  }
  {
    absl::MutexLock lock(&mu_);
    trainer_ = std::make_unique<Trainer>(*topts, &daemon->client(), backend_, std::move(*data));
  }
  return Train();
}

int WorkerMember::Train() {
  std::atomic<bool> stop{false};
  MemberDaemon* daemon;
  Trainer* trainer;
  {
    absl::MutexLock lock(&mu_);
    daemon = daemon_;
    trainer = trainer_.get();
  }
  // Stops on a signal, or once the scheduler says the job was aborted (a
  // worker waiting on a pipeline neighbour would not hear it at the gate);
  // a stage's links follow its replica's restarts (worker/member_loop.h).
  std::thread watcher = Watch(&stop, trainer, [daemon] {
    WorkerNews news;
    news.shutdown = ShutdownRequested();
    news.job_state = daemon->client().job_state();
    news.link_generation = daemon->client().link_generation();
    return news;
  });
  // (Trainer::Run turns a failed allocation in the clock loop into an
  // error itself; this catches one while it builds the model.)
  const absl::StatusOr<double> acc =
      OutOfMemoryAsError("building the model", [&] { return trainer->Run(stop); });
  const bool interrupted = ShutdownRequested();
  stop = true;
  watcher.join();
  if (acc.ok()) {
    Report(FINISHED, "", *acc);
    return 0;
  }
  const std::string why = interrupted ? "interrupted" : std::string(acc.status().message());
  spdlog::error("training stopped: {}", why);
  Report(FAILED, why);
  return 1;
}

// ps_worker --standalone: the job alone in this process (worker/standalone/standalone.h).
int RunStandalone(const WorkerConfig& config, kernels::Backend* backend, DType wire) {
  absl::StatusOr<JobSpec> job = LoadJobSpec(config.job_file);
  if (job.ok()) job = StandaloneJob(*std::move(job));
  if (!job.ok()) {
    spdlog::error("{}: {}", config.job_file, job.status().message());
    return 2;
  }
  if (!config.data_dir.empty()) job->mutable_data()->set_path(config.data_dir);
  absl::StatusOr<TrainTest> data =
      OutOfMemoryAsError("loading the data set", [&] { return LoadDataset(*job); });
  if (!data.ok()) {
    spdlog::error("cannot load the data set: {}", data.status().message());
    return 1;
  }
  RegisterResponse reg;
  absl::StatusOr<TrainerOptions> topts =
      TrainerOptionsFor(config, backend->name(), wire, nullptr, reg, *job);
  if (!topts.ok()) {
    spdlog::error("{}", topts.status().message());
    return 2;
  }
  spdlog::info("standalone: the servers' store and optimizer in this process, no scheduler");
  Trainer trainer(*topts, /*scheduler=*/nullptr, backend, *std::move(data));
  std::atomic<bool> stop{false};
  std::thread watcher = Watch(&stop, &trainer, [] {
    WorkerNews news;
    news.shutdown = ShutdownRequested();
    news.job_state = RUNNING_JOB;  // no scheduler to abort it
    return news;
  });
  const absl::StatusOr<double> acc =
      OutOfMemoryAsError("building the model", [&] { return trainer.Run(stop); });
  stop = true;
  watcher.join();
  MemberStatus st = trainer.Status();
  st.set_state(acc.ok() ? FINISHED : FAILED);
  if (!acc.ok()) {
    st.set_message(std::string(acc.status().message()));
    spdlog::error("training stopped: {}", acc.status().message());
  }
  if (!config.status_file.empty()) {
    absl::StatusOr<std::string> json = StatusJson(st);
    std::ofstream out(config.status_file);
    if (!json.ok() || !(out << *json)) {
      spdlog::error("{}: cannot write the status", config.status_file);
      return 1;
    }
  }
  return acc.ok() ? 0 : 1;
}

}  // namespace

int RunWorker(const WorkerConfig& config) {
  SetLogIdentity("worker", -1);
  InstallShutdownHandlers();
  InstallOutOfMemoryExit();
  TuneMallocForBulkTraffic();
  kernels::Precision precision = kernels::Precision::kFp32;
  DType wire = FP32;
  if (const absl::Status st = CheckConfig(config, &precision, &wire); !st.ok()) {
    spdlog::error("{}", st.message());
    return 2;
  }
  absl::StatusOr<std::unique_ptr<kernels::Backend>> backend = OpenBackend(config, precision);
  if (!backend.ok()) {
    spdlog::error("{}", backend.status().message());
    return 2;
  }
  if (config.standalone) return RunStandalone(config, backend->get(), wire);
  StageLinkService stage_link;
  WorkerMember worker(config, backend->get(), wire, &stage_link);
  WorkerService service([&worker] { return worker.Status(); });
  MemberConfig member = config.member;
  // Pipeline stages send each other activations: as large as pushes.
  member.server.max_receive_bytes = kMaxMessageBytes;
  member.server.max_streams_per_client = 16;
  int code = 0;
  absl::StatusOr<std::unique_ptr<MemberDaemon>> daemon =
      MemberDaemon::Start(member, {&service, &stage_link}, &code);
  if (!daemon.ok()) return code;
  worker.Attach(daemon->get());
  const absl::StatusOr<RegisterResponse> reg = (*daemon)->Register(&code);
  if (reg.ok()) code = worker.Run(*reg);
  (*daemon)->Shutdown(absl::Seconds(1));
  return code;
}

}  // namespace pstrain
