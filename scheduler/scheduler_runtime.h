// The scheduler from start to end: the job spec (file, overrides,
// defaults, validation), a resume from the checkpoint directory's manifest,
// the gRPC service, and the liveness loop until every member has heard the
// job's end. ps_scheduler's main only parses flags into a SchedulerConfig.
#ifndef PSTRAIN_SCHEDULER_SCHEDULER_RUNTIME_H_
#define PSTRAIN_SCHEDULER_SCHEDULER_RUNTIME_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/job.pb.h"
#include "scheduler/spec_overrides.h"

namespace pstrain {

struct SchedulerConfig {
  std::string job_file;
  std::string listen = "127.0.0.1:0";
  std::string port_file;
  std::string trace_file;
  std::string status_file;  // the Status as JSON, written at the start and at the end
  std::optional<int> metrics_port;  // /metrics, the dashboard and /api/status
  std::string run_dir;              // the job's curves as JSON lines (curves.jsonl)
  // The job's state, kept so that a scheduler started again on it takes the
  // job over (scheduler/state_file.h); empty: not kept.
  std::string state_dir;
  SpecOverrides overrides;  // scheduler/spec_overrides.h
  absl::Duration replacement_timeout = absl::Minutes(1);
  absl::Duration heartbeat_timeout = absl::Seconds(5);
  std::string on_worker_failure = "shrink";     // shrink, abort or wait
  absl::Duration linger;                        // keep answering Status this long after the end
  absl::Duration end_grace = absl::Seconds(5);  // for every member to hear of the end
};

// Runs the scheduler to the job's end; returns the process's exit code (0
// the job finished, 1 it was aborted, 2 a bad command line, job spec, state
// file or start). With a state file in config.state_dir, takes its job over
// (config.job_file, if given, must describe the same job).
int RunScheduler(const SchedulerConfig& config);

}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_SCHEDULER_RUNTIME_H_
