// ps_scheduler: membership, heartbeats, the clock table and its gate, and the
// job spec every member receives.
//
//   ps_scheduler --job=FILE [--listen=HOST:PORT] [--consistency=bsp|ssp|asp]
//                [--staleness=N] [--num_servers=N] [--num_workers=N] ...
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "common/flags.h"
#include "scheduler/scheduler_runtime.h"

ABSL_FLAG(std::string, job, "", "the job spec, a text-format pstrain.JobSpec (required)");
ABSL_FLAG(std::string, listen, "127.0.0.1:0", "HOST:PORT to serve on; port 0 lets the OS choose");
ABSL_FLAG(std::string, port_file, "", "write the bound HOST:PORT to this file");
ABSL_FLAG(std::string, trace_file, "", "write every clock report and gate opening as JSON lines");
ABSL_FLAG(std::string, status_file, "",
          "write the cluster's Status here as JSON (as psctl status --json prints it) when the "
          "job starts and once more when it has ended: who finished, failed or died, accuracy");
ABSL_FLAG(std::optional<int>, metrics_port, std::nullopt,
          "serve Prometheus metrics on /metrics and the dashboard on / at http://HOST:PORT, "
          "HOST being --listen's (0: the OS picks a port, shown in Status); not given: neither");
ABSL_FLAG(std::string, state_dir, "",
          "keep the job's state in STATE_DIR/scheduler.state (fsynced at every change of "
          "membership, generation, rollback, consistency, checkpoint requests or the job's end, "
          "and each second while clocks move); a scheduler started again on it takes the job "
          "over, and the members, which retry for --scheduler_timeout_ms, carry on");
ABSL_FLAG(std::string, run_dir, "",
          "append the job's curves (clock, time, loss, accuracy, samples/s, per-worker clocks) "
          "to RUN_DIR/curves.jsonl, one JSON object a line (psctl plot draws them)");
// Overrides of the job spec: given (with any value), they replace the spec's
// (each flag's field and allowed values: scheduler/spec_overrides.cc).
ABSL_FLAG(std::string, consistency, "", "override: bsp, ssp or asp");
ABSL_FLAG(int64_t, staleness, 0, "override: SSP's staleness bound s (>= 0)");
ABSL_FLAG(int64_t, num_servers, 1, "override: servers the job waits for (1..4096)");
ABSL_FLAG(int64_t, num_workers, 1, "override: workers the job waits for (1..65536)");
ABSL_FLAG(int64_t, batch_size, 1, "override: global batch size of one clock (>= 1)");
ABSL_FLAG(int64_t, epochs, 1, "override: epochs (>= 0)");
ABSL_FLAG(int64_t, clocks, 0, "override: total clocks (0 = use epochs)");
ABSL_FLAG(int64_t, seed, 0, "override: seed of the weights' init and the data order (>= 0)");
ABSL_FLAG(std::string, data_dir, "", "override: data.path");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "override: checkpoint_dir, shared by the scheduler and the servers (a job started on "
          "a directory with a manifest resumes from it)");
ABSL_FLAG(int64_t, checkpoint_every, 0, "override: checkpoint every this many clocks (0: never)");
ABSL_FLAG(int64_t, standby_copies, 0,
          "override: 1 keeps a standby copy of every server's chunks on the next server, "
          "promoted without a rollback when the server dies (docs/failures.md)");
ABSL_FLAG(int64_t, pipeline_stages, 1,
          "override: pipeline stages the model is cut into (num_workers = replicas x stages)");
ABSL_FLAG(int64_t, micro_batches, 1, "override: micro-batches of a worker's or replica's share");
ABSL_FLAG(std::string, pipeline_schedule, "", "override: gpipe or 1f1b");
ABSL_FLAG(std::string, compression, "",
          "override: the workers' pushes compressed with error feedback, int8 or int4 (8 or 4 "
          "bits a value), sign (one bit a value) or top_k (the largest 10 % of the values), or "
          "none (docs/compression.md)");
ABSL_FLAG(int64_t, compression_pulls, 0,
          "override: 1 compresses the pulls too (the change since the weights a worker holds)");
ABSL_FLAG(std::string, table_consistency, "",
          "override: the sparse tables' bsp, ssp or asp (asp in a bsp job: PERSIA's hybrid, "
          "asynchronous tables beside synchronous dense training)");
ABSL_FLAG(int, replacement_timeout_ms, 60000,
          "end the job when a dead server (of a job with checkpoints) or a dead worker (under "
          "--on_worker_failure=wait) has neither come back nor been replaced (--id=ID) this "
          "long");
ABSL_FLAG(int, heartbeat_timeout_ms, 5000,
          "declare a member dead after this long without a heartbeat (members send one every "
          "--heartbeat_interval_ms, 500 by default)");
ABSL_FLAG(std::string, on_worker_failure, "shrink",
          "shrink: go on without a dead worker (the others split its share of each batch); "
          "abort: end the job; wait: hold the gate until it comes back or a replacement "
          "(ps_worker --id=ID) takes its place");
ABSL_FLAG(int, linger_ms, 0,
          "after the job ends, keep answering Status this long (to see who failed and why)");
ABSL_FLAG(int, end_grace_ms, 5000,
          "after the job ends, how long to wait for every member to hear of it");

int main(int argc, char** argv) {
  using pstrain::GivenFlag;
  absl::SetProgramUsageMessage("ps_scheduler --job=FILE [--listen=HOST:PORT] [overrides]");
  pstrain::ParseFlagsOrExit(argc, argv);
  pstrain::SchedulerConfig c;
  c.job_file = absl::GetFlag(FLAGS_job);
  c.listen = absl::GetFlag(FLAGS_listen);
  c.port_file = absl::GetFlag(FLAGS_port_file);
  c.trace_file = absl::GetFlag(FLAGS_trace_file);
  c.status_file = absl::GetFlag(FLAGS_status_file);
  c.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  c.run_dir = absl::GetFlag(FLAGS_run_dir);
  c.state_dir = absl::GetFlag(FLAGS_state_dir);
  pstrain::ExitOnBadFlag(
      pstrain::CheckFlagNotEmpty("state_dir", GivenFlag(FLAGS_state_dir), "a directory"));
  for (const pstrain::SpecOverrideFlag& f : pstrain::SpecOverrideFlags()) {
    if (const std::optional<std::string> value = pstrain::GivenFlagText(f.flag)) {
      c.overrides[f.flag] = *value;
    }
  }
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  pstrain::ExitOnBadFlag(pstrain::CheckFlagRanges({
      {"replacement_timeout_ms", absl::GetFlag(FLAGS_replacement_timeout_ms), 1, kIntMax},
      {"heartbeat_timeout_ms", absl::GetFlag(FLAGS_heartbeat_timeout_ms), 1, kIntMax},
      {"linger_ms", absl::GetFlag(FLAGS_linger_ms), 0, kIntMax},
      {"end_grace_ms", absl::GetFlag(FLAGS_end_grace_ms), 0, kIntMax},
      {"metrics_port", c.metrics_port, 0, 65535},
  }));
  pstrain::ExitOnBadFlag(pstrain::CheckOverrides(c.overrides));
  c.replacement_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_replacement_timeout_ms));
  c.heartbeat_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_heartbeat_timeout_ms));
  c.on_worker_failure = absl::GetFlag(FLAGS_on_worker_failure);
  c.linger = absl::Milliseconds(absl::GetFlag(FLAGS_linger_ms));
  c.end_grace = absl::Milliseconds(absl::GetFlag(FLAGS_end_grace_ms));
  return pstrain::RunScheduler(c);
}
