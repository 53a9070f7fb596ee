#include "scheduler/scheduler_runtime.h"

#include <filesystem>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_names.h"
#include "common/daemon.h"
#include "common/flags.h"
#include "google/protobuf/text_format.h"
#include "common/external_model.h"
#include "common/job_spec.h"
#include "common/listen.h"
#include "common/logging.h"
#include "common/rpc.h"
#include "common/security.h"
#include "common/stage_plan.h"
#include "common/status_json.h"
#include "common/status_macros.h"
#include "common/trace.h"
#include "common/http_server.h"
#include "scheduler/manifest.h"
#include "scheduler/run_history.h"
#include "scheduler/scheduler_http.h"
#include "scheduler/scheduler_service.h"
#include "scheduler/state_file.h"
#include "google/protobuf/util/message_differencer.h"

namespace pstrain {

namespace {

// The job: its file, the overrides, the defaults, checked.
absl::StatusOr<JobSpec> LoadJob(const SchedulerConfig& config) {
  if (config.job_file.empty()) return absl::InvalidArgumentError("--job=FILE is required");
  ASSIGN_OR_RETURN(JobSpec job, LoadJobSpec(config.job_file));
  absl::Status st = ApplyOverrides(config.overrides, &job);
  if (st.ok()) {
    ApplyJobDefaults(&job);
    st = ValidateJobSpec(job);
  }
  if (!st.ok()) return absl::Status(st.code(), absl::StrCat(config.job_file, ": ", st.message()));
  return job;
}

// The failure policy, and the clock to start from: a job started on a
// directory with a manifest resumes from it; a job taken over keeps its own.
absl::StatusOr<SchedulerPolicy> PolicyFor(const SchedulerConfig& config, const JobSpec& job,
                                          const std::optional<SchedulerState>& takeover) {
  const std::string& f = config.on_worker_failure;
  if (f != "shrink" && f != "abort" && f != "wait") {
    return absl::InvalidArgumentError(
        absl::StrCat("--on_worker_failure=", f, ": expected shrink, abort or wait"));
  }
  SchedulerPolicy policy;
  policy.on_worker_failure = f == "shrink"  ? WorkerFailure::kShrink
                             : f == "abort" ? WorkerFailure::kAbort
                                            : WorkerFailure::kWait;
  policy.replacement_timeout = config.replacement_timeout;
  policy.heartbeat_timeout = config.heartbeat_timeout;
  if (takeover.has_value()) {
    const std::string& kept = takeover->on_worker_failure();
    if (!kept.empty() && kept != f) {
      return absl::InvalidArgumentError(
          absl::StrCat(SchedulerStatePath(config.state_dir), " holds a job run with "
                       "--on_worker_failure=", kept, "; take it over with the same"));
    }
    policy.start_clock = takeover->start_clock();
    return policy;
  }
  if (job.checkpoint_dir().empty()) return policy;
  ASSIGN_OR_RETURN(const std::optional<Manifest> manifest, ReadManifest(job.checkpoint_dir()));
  if (!manifest.has_value()) return policy;
  if (manifest->num_servers != job.num_servers() || manifest->clock > TotalClocks(job)) {
    return absl::InvalidArgumentError(absl::StrCat(
        job.checkpoint_dir(), "/manifest.json is of a job of ", manifest->num_servers,
        " servers at clock ", manifest->clock, "; this one has ", job.num_servers(),
        " servers and ", TotalClocks(job), " clocks (start it on another --checkpoint_dir)"));
  }
  policy.start_clock = manifest->clock;
  spdlog::info("resuming from the checkpoint of clock {} named by {}/manifest.json",
               manifest->clock, job.checkpoint_dir());
  return policy;
}

// The state file of --state_dir, if there is one, with the newest manifest
// of the job's checkpoint directory (which may be newer than the state).
absl::StatusOr<std::optional<SchedulerState>> ReadTakeover(const SchedulerConfig& config) {
  if (config.state_dir.empty()) return std::optional<SchedulerState>();
  ASSIGN_OR_RETURN(std::optional<SchedulerState> state, ReadSchedulerState(config.state_dir));
  if (!state.has_value() || state->job().checkpoint_dir().empty()) return state;
  ASSIGN_OR_RETURN(const std::optional<Manifest> manifest,
                   ReadManifest(state->job().checkpoint_dir()));
  if (manifest.has_value() && manifest->clock > state->rollbacks().manifest_clock()) {
    state->mutable_rollbacks()->set_manifest_clock(manifest->clock);
  }
  return state;
}

// The job: the one taken over (which --job, if given, must equal), else
// --job with the overrides.
absl::StatusOr<JobSpec> JobFor(const SchedulerConfig& config,
                               const std::optional<SchedulerState>& takeover) {
  if (!takeover.has_value()) return LoadJob(config);
  if (config.job_file.empty()) {
    if (!config.overrides.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "overrides of the job spec without --job: ", SchedulerStatePath(config.state_dir),
          " holds the job taken over; give its --job and overrides, or none"));
    }
    // The stored job is input like any other: checked as --job would be.
    if (const absl::Status st = ValidateJobSpec(takeover->job()); !st.ok()) {
      return absl::Status(st.code(),
                          absl::StrCat(SchedulerStatePath(config.state_dir), ": ", st.message()));
    }
    return takeover->job();
  }
  // (An EXTERNAL model's parameters are the workers': --job may leave them out.)
  ASSIGN_OR_RETURN(JobSpec job, LoadJob(config));
  job = WithDeclaredModel(std::move(job), takeover->job());
  if (!google::protobuf::util::MessageDifferencer::Equals(job, takeover->job())) {
    return absl::InvalidArgumentError(absl::StrCat(
        SchedulerStatePath(config.state_dir), " holds another job ('", takeover->job().name(),
        "') than --job and the overrides describe: start without --job to take it over, or "
        "on another --state_dir"));
  }
  return job;
}

// Starts serving and writes the port file; the advertised address.
absl::StatusOr<std::string> Listen(const SchedulerConfig& config, SchedulerService* service,
                                   std::unique_ptr<grpc::Server>* server) {
  ServerOptions options;
  options.max_receive_bytes = kMaxControlMessageBytes;
  options.max_streams_per_client = 64;
  // Requests in flight: the scheduler's are small (at most 4 MiB each).
  options.quota = std::make_shared<grpc::ResourceQuota>("ps_scheduler requests");
  options.quota->Resize(32 << 20);
  ASSIGN_OR_RETURN(Listening listening,
                   ListenAndAnnounce(config.listen, config.port_file, {service}, options,
                                     [service](const std::string& address) {
                                       service->SetAddress(address);
                                     }));
  *server = std::move(listening.server);
  return listening.address;
}

// Watches the members until every one has heard of the job's end (or the
// process is told to stop), recording the job's curves; the job's end state.
JobState Watch(const SchedulerConfig& config, SchedulerService* service, RunHistory* history) {
  absl::Time recorded, last = absl::Now();
  while (!service->MembersEnded(config.end_grace)) {
    // The loop comes round every 50 ms: a gap of half the heartbeat timeout
    // means this process was stopped or starved, not that members were.
    const absl::Time now = absl::Now();
    if (now - last > config.heartbeat_timeout / 2) service->Paused(now - last);
    last = now;
    service->CheckLiveness(now);
    service->PersistClocks();
    if (absl::Now() - recorded >= absl::Milliseconds(200)) {
      recorded = absl::Now();
      history->Record(service->GetStatus(), absl::ToUnixMillis(recorded));
    }
    const JobState state = service->job_state();
    if (ShutdownRequested() && !config.state_dir.empty() && state != DONE && state != ABORTED) {
      // The job is kept: a scheduler started again on the state dir takes
      // it over (psctl stop ends a job).
      spdlog::warn("interrupted; the job goes on in {}: a scheduler started again on it takes it "
                   "over within the members' --scheduler_timeout_ms (psctl stop ends a job)",
                   SchedulerStatePath(config.state_dir));
      return RUNNING_JOB;
    }
    if (ShutdownRequested()) {
      service->Abort("the scheduler was interrupted");
      // Give members a heartbeat or two to hear of it.
      const absl::Time until = absl::Now() + absl::Seconds(2);
      while (!service->MembersEnded(absl::Seconds(2)) && absl::Now() < until) {
        absl::SleepFor(absl::Milliseconds(50));
      }
      break;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return service->job_state();
}

// Keeps answering Status for --linger_ms (or until told to stop).
void Linger(const SchedulerConfig& config) {
  const absl::Time until = absl::Now() + config.linger;
  while (absl::Now() < until && !ShutdownRequested()) absl::SleepFor(absl::Milliseconds(50));
}

// Writes the Status to --status_file, if one was given.
absl::Status WriteStatusFile(const SchedulerConfig& config, SchedulerService* service) {
  if (config.status_file.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const std::string json, StatusJson(service->GetStatus()));
  return WriteFileAtomically(config.status_file, json);
}

// A state file of a job that ended: nothing to take over. The exit code
// (0 for a done job, which a supervisor does not start again; 2 for an
// aborted one), else nullopt.
std::optional<int> EndedJobExit(const SchedulerConfig& config,
                                const std::optional<SchedulerState>& takeover) {
  if (!takeover.has_value()) return std::nullopt;
  const JobState state = takeover->job_state();
  if (state != DONE && state != ABORTED) return std::nullopt;
  spdlog::warn("the job in {} has ended ({}{}{}); start a new job on another --state_dir "
               "(or move scheduler.state away)",
               SchedulerStatePath(config.state_dir), JobState_Name(state),
               takeover->message().empty() ? "" : ": ", takeover->message());
  return state == DONE ? 0 : 2;
}

// With --metrics_port: /metrics, the dashboard and /api/status (null without).
absl::StatusOr<std::unique_ptr<HttpServer>> ServeHttp(const SchedulerConfig& config,
                                                      SchedulerService* service,
                                                      RunHistory* history) {
  if (!config.metrics_port.has_value()) return std::unique_ptr<HttpServer>();
  std::string at;
  ASSIGN_OR_RETURN(std::unique_ptr<HttpServer> http,
                   ServeMetricsPort(
                       config.listen, *config.metrics_port,
                       [&](const std::string& host, int port) {
                         return ServeSchedulerHttp(host, port, service, history);
                       },
                       &at));
  service->SetMetricsAddress(at);
  spdlog::info("dashboard on http://{}/, metrics on http://{}/metrics", at, at);
  return http;
}

void LogJob(const std::string& address, const JobSpec& job) {
  spdlog::info("listening on {}; job '{}': {} (staleness {}), {} servers, {} workers, {} clocks",
               address, job.name(), Consistency_Name(job.consistency()), job.staleness(), job.num_servers(), job.num_workers(),
               TotalClocks(job));
  if (job.pipeline_stages() > 1) {
    spdlog::info("pipeline: {} replicas of {} stages, {} micro-batches, {}: {}",
                 job.num_workers() / job.pipeline_stages(), job.pipeline_stages(),
                 job.micro_batches(), job.pipeline_schedule() == GPIPE ? "GPipe" : "1F1B",
                 DescribeStages(job.model(), *PlanStages(job.model(), job.pipeline_stages())));
  }
}

}  // namespace

int RunScheduler(const SchedulerConfig& config) {
  SetLogIdentity("scheduler", -1);
  InstallShutdownHandlers();
  InstallOutOfMemoryExit();
  auto fail = [](const absl::Status& st) {
    spdlog::error("{}", st.message());
    return 2;
  };
  if (const absl::Status st = ConfigureSecurityFromFlags(); !st.ok()) return fail(st);
  std::unique_ptr<StateDirLock> lock;  // held until this process ends
  if (!config.state_dir.empty()) {
    absl::StatusOr<std::unique_ptr<StateDirLock>> taken = StateDirLock::Take(config.state_dir);
    if (!taken.ok()) return fail(taken.status());
    lock = std::move(*taken);
  }
  const absl::StatusOr<std::optional<SchedulerState>> takeover = ReadTakeover(config);
  if (!takeover.ok()) return fail(takeover.status());
  if (const std::optional<int> code = EndedJobExit(config, *takeover)) return *code;
  const absl::StatusOr<JobSpec> job = JobFor(config, *takeover);
  if (!job.ok()) return fail(job.status());
  auto trace = TraceWriter::Open(config.trace_file, /*append=*/takeover->has_value());
  if (!trace.ok()) return fail(trace.status());
  const absl::StatusOr<SchedulerPolicy> policy = PolicyFor(config, *job, *takeover);
  if (!policy.ok()) return fail(policy.status());
  if (const absl::Status st = WriteCheckpointJob(*job); !st.ok()) return fail(st);
  auto service = std::make_unique<SchedulerService>(*job, trace->get(), *policy);
  if (!config.state_dir.empty()) {
    if (const absl::Status st = service->KeepState(config.state_dir, *takeover); !st.ok()) {
      return fail(absl::Status(st.code(), absl::StrCat(SchedulerStatePath(config.state_dir), ": ",
                                                       st.message())));
    }
  }
  std::unique_ptr<grpc::Server> server;
  const absl::StatusOr<std::string> address = Listen(config, service.get(), &server);
  if (!address.ok()) return fail(address.status());
  if (lock != nullptr) lock->Describe(*address);
  if (const absl::Status st = WriteStatusFile(config, service.get()); !st.ok()) return fail(st);
  absl::StatusOr<std::unique_ptr<RunHistory>> history = RunHistory::Open(config.run_dir);
  if (!history.ok()) return fail(history.status());
  absl::StatusOr<std::unique_ptr<HttpServer>> http =
      ServeHttp(config, service.get(), history->get());
  if (!http.ok()) return fail(http.status());
  LogJob(*address, *job);
  const JobState end = Watch(config, service.get(), history->get());
  if (end == RUNNING_JOB) {  // interrupted, the job kept in the state dir
    service->Leave();
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    return 1;
  }
  if (const absl::Status st = WriteStatusFile(config, service.get()); !st.ok()) {
    spdlog::error("{}", st.message());
  }
  (*history)->Record(service->GetStatus(), absl::ToUnixMillis(absl::Now()));
  Linger(config);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  return end == DONE ? 0 : 1;
}

}  // namespace pstrain
