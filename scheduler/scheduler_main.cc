// ps_scheduler: membership, heartbeats, the clock table and its gate, and the
// job spec every member receives.
//
//   ps_scheduler --job=FILE [--listen=HOST:PORT] [--consistency=bsp|ssp|asp]
//                [--staleness=N] [--num_servers=N] [--num_workers=N] ...
#include <cstdlib>
#include <memory>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/daemon.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/rpc.h"
#include "common/security.h"
#include "common/trace.h"
#include "scheduler/manifest.h"
#include "scheduler/scheduler_service.h"

ABSL_FLAG(std::string, job, "", "the job spec, a text-format pstrain.JobSpec (required)");
ABSL_FLAG(std::string, listen, "127.0.0.1:0", "HOST:PORT to serve on; port 0 lets the OS choose");
ABSL_FLAG(std::string, port_file, "", "write the bound HOST:PORT to this file");
ABSL_FLAG(std::string, trace_file, "", "write every clock report and gate opening as JSON lines");
// Overrides of the job spec; unset (empty / -1) keeps the spec's value.
ABSL_FLAG(std::string, consistency, "", "override: bsp, ssp or asp");
ABSL_FLAG(int, staleness, -1, "override: SSP's staleness bound s");
ABSL_FLAG(int, num_servers, -1, "override: servers the job waits for");
ABSL_FLAG(int, num_workers, -1, "override: workers the job waits for");
ABSL_FLAG(int, batch_size, -1, "override: global batch size of one clock");
ABSL_FLAG(int, epochs, -1, "override: epochs");
ABSL_FLAG(int64_t, steps, -1, "override: total clocks (0 = use epochs)");
ABSL_FLAG(int64_t, seed, -1, "override: seed of the weights' init and the data order");
ABSL_FLAG(std::string, data_dir, "", "override: data.path");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "override: checkpoint_dir, shared by the scheduler and the servers (a job started on "
          "a directory with a manifest resumes from it)");
ABSL_FLAG(int64_t, checkpoint_every, -1, "override: checkpoint every this many clocks (0: never)");
ABSL_FLAG(int, replacement_timeout_ms, 60000,
          "end the job when a dead server (of a job with checkpoints) or a dead worker (under "
          "--on_worker_failure=wait) has neither come back nor been replaced (--rank=ID) this "
          "long");
ABSL_FLAG(int, heartbeat_timeout_ms, 5000,
          "declare a member dead after this long without a heartbeat (members send one every "
          "--heartbeat_interval_ms, 500 by default)");
ABSL_FLAG(std::string, on_worker_failure, "shrink",
          "shrink: go on without a dead worker (the others split its share of each batch); "
          "abort: end the job; wait: hold the gate until it comes back or a replacement "
          "(ps_worker --rank=ID) takes its place");
ABSL_FLAG(int, linger_ms, 0,
          "after the job ends, keep answering Status this long (to see who failed and why)");
ABSL_FLAG(int, end_grace_ms, 5000,
          "after the job ends, how long to wait for every member to hear of it");

namespace pstrain {
namespace {

absl::Status ApplyFlagOverrides(JobSpec* job) {
  const std::string consistency = absl::AsciiStrToLower(absl::GetFlag(FLAGS_consistency));
  if (consistency == "bsp") {
    job->set_consistency(BSP);
  } else if (consistency == "ssp") {
    job->set_consistency(SSP);
  } else if (consistency == "asp") {
    job->set_consistency(ASP);
  } else if (!consistency.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--consistency=", consistency, ": expected bsp, ssp or asp"));
  }
  if (absl::GetFlag(FLAGS_staleness) >= 0) job->set_staleness(absl::GetFlag(FLAGS_staleness));
  if (absl::GetFlag(FLAGS_num_servers) >= 0) job->set_num_servers(absl::GetFlag(FLAGS_num_servers));
  if (absl::GetFlag(FLAGS_num_workers) >= 0) job->set_num_workers(absl::GetFlag(FLAGS_num_workers));
  if (absl::GetFlag(FLAGS_batch_size) >= 0) job->set_batch_size(absl::GetFlag(FLAGS_batch_size));
  if (absl::GetFlag(FLAGS_epochs) >= 0) job->set_epochs(absl::GetFlag(FLAGS_epochs));
  if (absl::GetFlag(FLAGS_steps) >= 0) job->set_steps(absl::GetFlag(FLAGS_steps));
  if (absl::GetFlag(FLAGS_seed) >= 0) job->set_seed(absl::GetFlag(FLAGS_seed));
  if (!absl::GetFlag(FLAGS_data_dir).empty()) {
    job->mutable_data()->set_path(absl::GetFlag(FLAGS_data_dir));
  }
  if (!absl::GetFlag(FLAGS_checkpoint_dir).empty()) {
    job->set_checkpoint_dir(absl::GetFlag(FLAGS_checkpoint_dir));
  }
  if (absl::GetFlag(FLAGS_checkpoint_every) >= 0) {
    job->set_checkpoint_every(absl::GetFlag(FLAGS_checkpoint_every));
  }
  return absl::OkStatus();
}

int Run() {
  SetLogIdentity("scheduler", -1);
  InstallShutdownHandlers();
  if (const absl::Status st = ConfigureSecurityFromFlags(); !st.ok()) {
    spdlog::error("{}", st.message());
    return 2;
  }
  if (absl::GetFlag(FLAGS_job).empty()) {
    spdlog::error("--job=FILE is required");
    return 2;
  }
  absl::StatusOr<JobSpec> job = LoadJobSpec(absl::GetFlag(FLAGS_job));
  if (!job.ok()) {
    spdlog::error("{}", job.status().message());
    return 2;
  }
  absl::Status st = ApplyFlagOverrides(&*job);
  if (st.ok()) {
    ApplyJobDefaults(&*job);
    st = ValidateJobSpec(*job);
  }
  if (!st.ok()) {
    spdlog::error("{}: {}", absl::GetFlag(FLAGS_job), st.message());
    return 2;
  }
  auto trace = TraceWriter::Open(absl::GetFlag(FLAGS_trace_file));
  if (!trace.ok()) {
    spdlog::error("{}", trace.status().message());
    return 2;
  }
  const std::string on_failure = absl::GetFlag(FLAGS_on_worker_failure);
  if (on_failure != "shrink" && on_failure != "abort" && on_failure != "wait") {
    spdlog::error("--on_worker_failure={}: expected shrink, abort or wait", on_failure);
    return 2;
  }
  SchedulerPolicy policy;
  policy.on_worker_failure = on_failure == "shrink"  ? WorkerFailure::kShrink
                             : on_failure == "abort" ? WorkerFailure::kAbort
                                                     : WorkerFailure::kWait;
  policy.replacement_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_replacement_timeout_ms));
  policy.heartbeat_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_heartbeat_timeout_ms));
  if (!job->checkpoint_dir().empty()) {
    // A job started on a directory with a manifest resumes from it.
    absl::StatusOr<std::optional<Manifest>> manifest = ReadManifest(job->checkpoint_dir());
    if (!manifest.ok()) {
      spdlog::error("{}", manifest.status().message());
      return 2;
    }
    if (manifest->has_value()) {
      const Manifest& m = **manifest;
      if (m.num_servers != job->num_servers() || m.clock > TotalClocks(*job)) {
        spdlog::error(
            "{}/manifest.json is of a job of {} servers at clock {}; this one has {} servers and "
            "{} clocks (start it on another --checkpoint_dir)",
            job->checkpoint_dir(), m.num_servers, m.clock, job->num_servers(), TotalClocks(*job));
        return 2;
      }
      policy.start_clock = m.clock;
      spdlog::info("resuming from the checkpoint of clock {} named by {}/manifest.json", m.clock,
                   job->checkpoint_dir());
    }
  }
  auto service = std::make_unique<SchedulerService>(*job, trace->get(), policy);
  std::string bound;
  ServerOptions server_options;
  server_options.max_receive_bytes = kMaxControlMessageBytes;
  server_options.max_streams_per_client = 64;
  auto server = StartServer(absl::GetFlag(FLAGS_listen), {service.get()}, &bound, server_options);
  if (!server.ok()) {
    spdlog::error("{}", server.status().message());
    return 2;
  }
  const std::string address = AdvertisedAddress(bound);
  service->SetAddress(address);
  const char* mode = job->consistency() == BSP ? "BSP" : job->consistency() == SSP ? "SSP" : "ASP";
  spdlog::info("listening on {}; job '{}': {} (staleness {}), {} servers, {} workers, {} clocks",
               address, job->name(), mode, job->staleness(), job->num_servers(), job->num_workers(),
               TotalClocks(*job));
  if (!absl::GetFlag(FLAGS_port_file).empty()) {
    st = WritePortFile(absl::GetFlag(FLAGS_port_file), address);
    if (!st.ok()) {
      spdlog::error("{}", st.message());
      return 2;
    }
  }
  const absl::Duration grace = absl::Milliseconds(absl::GetFlag(FLAGS_end_grace_ms));
  while (!service->MembersToldOfEnd(grace)) {
    service->CheckLiveness(absl::Now());
    if (ShutdownRequested()) {
      service->Abort("the scheduler was interrupted");
      // Give members a heartbeat or two to hear of it.
      absl::Time until = absl::Now() + absl::Seconds(2);
      while (!service->MembersToldOfEnd(absl::Seconds(2)) && absl::Now() < until) {
        absl::SleepFor(absl::Milliseconds(50));
      }
      break;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  const absl::Time linger_until = absl::Now() + absl::Milliseconds(absl::GetFlag(FLAGS_linger_ms));
  while (absl::Now() < linger_until && !ShutdownRequested()) absl::SleepFor(absl::Milliseconds(50));
  std::string message;
  const JobState end = service->job_state(&message);
  (*server)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  return end == DONE ? 0 : 1;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("ps_scheduler --job=FILE [--listen=HOST:PORT] [overrides]");
  absl::ParseCommandLine(argc, argv);
  return pstrain::Run();
}
