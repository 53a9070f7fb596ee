#include "tools/psctl_export.h"

#include <cstdint>
#include <cstdio>

#include "common/checkpoint_names.h"
#include "common/job_defaults.h"
#include "common/job_parse.h"
#include "tools/export.h"
#include "tools/psctl_control.h"
#include "tools/psctl_rpc.h"

namespace pstrain {
namespace {

int ExportFrom(const std::string& dir, const JobSpec& job, const std::string& out) {
  const absl::StatusOr<int64_t> clock = ExportCheckpoint(dir, job, out);
  if (!clock.ok()) {
    std::fprintf(stderr, "psctl export: %s\n", std::string(clock.status().message()).c_str());
    return 1;
  }
  std::printf("wrote %s: the weights of clock %lld\n", out.c_str(), static_cast<long long>(*clock));
  return 0;
}

// A checkpoint now, then its weights (the checkpoint directory must be
// readable from here: the same machine or a shared file system).
int ExportLive(const Endpoint& scheduler, const std::string& out, int wait_s) {
  ControlRequest req;
  req.set_action(CHECKPOINT);
  int64_t clock = 0;
  if (const grpc::Status rpc = AskControl(scheduler, req, &clock); !rpc.ok()) {
    return FailCall(scheduler.address, rpc);
  }
  if (const int code = WaitForCheckpoint(scheduler, clock, false, wait_s); code != 0) return code;
  ClusterStatus st;
  if (const grpc::Status s = FetchStatus(scheduler, &st); !s.ok()) {
    return FailCall(scheduler.address, s);
  }
  return ExportFrom(st.job().checkpoint_dir(), st.job(), out);
}

}  // namespace

int Export(const ExportOptions& options) {
  const std::string& dir = options.checkpoint_dir;
  if (options.out.empty() || options.scheduler.empty() == dir.empty()) {
    std::fprintf(
        stderr, "psctl export: give --out and either --scheduler or --checkpoint_dir with --job\n");
    return 2;
  }
  if (!options.scheduler.empty()) {
    return ExportLive({options.scheduler, options.timeout}, options.out, options.wait_s);
  }
  const std::string job_file = options.job.empty() ? CheckpointJobPath(dir) : options.job;
  absl::StatusOr<JobSpec> job = LoadJobSpec(job_file);
  if (!job.ok()) {
    std::fprintf(stderr, "psctl export: --job: %s\n", std::string(job.status().message()).c_str());
    return 2;
  }
  ApplyJobDefaults(&*job);
  return ExportFrom(dir, *job, options.out);
}

}  // namespace pstrain
