// psctl: the operator's command-line client.
//
//   psctl status --scheduler=HOST:PORT [--json]
//       every member of the cluster: role, id, address, state, clock, ...
//   psctl status --target=HOST:PORT [--role=server|worker] [--json]
//       one daemon's own Status
//   psctl watch --scheduler=HOST:PORT [--interval_ms=1000] [--count=N] [--json]
//       the same, refreshed in place, with a progress bar and an ETA
//   psctl checkpoint|drain|stop --scheduler=HOST:PORT [--wait] [--json]
//       a checkpoint now; that checkpoint and the job's end; the end now
//   psctl set-consistency --scheduler=HOST:PORT --mode=bsp|ssp|asp [--staleness=N]
//       the running job's consistency, from a clock a few clocks ahead on
//   psctl drain-server N --scheduler=HOST:PORT [--wait] [--json]
//       server N's chunks moved to the others at a checkpoint; then it exits
//   psctl export --scheduler=HOST:PORT --out=FILE.safetensors
//   psctl export --checkpoint_dir=DIR [--job=FILE] --out=FILE.safetensors
//       the model's weights (a checkpoint now, or the newest complete one)
//   psctl plot --run_dir=DIR --out=FILE.png|.svg
//       the curves of ps_scheduler --run_dir, drawn by gnuplot
//
// This file parses the flags and dispatches the verb: status and watch are
// tools/psctl_status.h, checkpoint, drain, stop, set-consistency and
// drain-server tools/psctl_control.h, export tools/psctl_export.h, plot tools/plot.h.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/flags.h"
#include "common/security.h"
#include "tools/plot.h"
#include "tools/psctl_control.h"
#include "tools/psctl_export.h"
#include "tools/psctl_rpc.h"
#include "tools/psctl_status.h"

ABSL_FLAG(std::string, scheduler, "", "the scheduler's HOST:PORT");
ABSL_FLAG(std::string, target, "", "one daemon's HOST:PORT (instead of --scheduler)");
ABSL_FLAG(std::string, role, "server", "with --target: server or worker");
ABSL_FLAG(bool, json, false, "print JSON instead of a table");
ABSL_FLAG(int, timeout_s, 5, "seconds to wait for an answer");
ABSL_FLAG(int, interval_ms, 1000, "watch: milliseconds between refreshes");
ABSL_FLAG(int, count, 0, "watch: refreshes before exiting (0: until the job ends)");
ABSL_FLAG(bool, wait, false,
          "checkpoint, drain: wait until the manifest names the checkpoint (drain: and the job "
          "has ended)");
ABSL_FLAG(int, wait_s, 300, "how long --wait and export wait for a checkpoint");
ABSL_FLAG(std::string, out, "", "export: the safetensors file; plot: the .png or .svg file");
ABSL_FLAG(std::string, checkpoint_dir, "", "export: a checkpoint directory (with --job)");
ABSL_FLAG(std::string, job, "",
          "export --checkpoint_dir: the job spec the checkpoint is of (default: the one the "
          "scheduler wrote into the directory, DIR/job.pbtxt)");
ABSL_FLAG(std::string, run_dir, "", "plot: the scheduler's --run_dir");
ABSL_FLAG(std::string, mode, "", "set-consistency: bsp, ssp or asp");
ABSL_FLAG(std::optional<int>, staleness, std::nullopt, "set-consistency --mode=ssp: the bound s");

namespace pstrain {
namespace {

Endpoint EndpointOf(const std::string& address) {
  return {address, absl::Seconds(absl::GetFlag(FLAGS_timeout_s))};
}

// Exits 2 (through ExitOnBadFlag) on a flag out of its range or choices.
void CheckFlags() {
  ExitOnBadFlag(CheckFlagRanges({
      {"timeout_s", absl::GetFlag(FLAGS_timeout_s), 1, 3600},
      {"interval_ms", absl::GetFlag(FLAGS_interval_ms), 50, 3600000},
      {"count", absl::GetFlag(FLAGS_count), 0, std::numeric_limits<int>::max()},
      {"wait_s", absl::GetFlag(FLAGS_wait_s), 1, 86400},
      {"staleness", absl::GetFlag(FLAGS_staleness), 0, std::numeric_limits<int>::max()},
  }));
  ExitOnBadFlag(CheckFlagChoice("role", absl::GetFlag(FLAGS_role), {"server", "worker"}));
}

int ExportVerb() {
  ExportOptions options;
  options.out = absl::GetFlag(FLAGS_out);
  options.scheduler = absl::GetFlag(FLAGS_scheduler);
  options.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  options.job = absl::GetFlag(FLAGS_job);
  options.timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  options.wait_s = absl::GetFlag(FLAGS_wait_s);
  return Export(options);
}

int StatusVerb() {
  const std::string scheduler = absl::GetFlag(FLAGS_scheduler);
  const std::string target = absl::GetFlag(FLAGS_target);
  if (scheduler.empty() == target.empty()) {
    std::fprintf(stderr, "psctl status: give exactly one of --scheduler and --target\n");
    return 2;
  }
  const bool json = absl::GetFlag(FLAGS_json);
  return scheduler.empty() ? StatusOfDaemon(EndpointOf(target), absl::GetFlag(FLAGS_role), json)
                           : StatusOfCluster(EndpointOf(scheduler), json);
}

// The verbs that talk to the scheduler (--scheduler required), with their
// operands (drain-server's server); -1 when `command` is none of them.
int SchedulerVerb(const std::string& command, const std::vector<std::string>& operands) {
  const std::map<std::string, ControlAction> actions = {
      {"checkpoint", CHECKPOINT}, {"drain", DRAIN}, {"stop", STOP}};
  if (command != "watch" && command != "set-consistency" && command != "drain-server" &&
      !actions.count(command)) {
    return -1;
  }
  if (operands.size() != (command == "drain-server" ? 1u : 0u)) {
    std::fprintf(stderr, "psctl %s: %s\n", command.c_str(),
                 command == "drain-server" ? "give one server id: psctl drain-server N"
                                           : "takes no operands");
    return 2;
  }
  const std::string scheduler = absl::GetFlag(FLAGS_scheduler);
  if (scheduler.empty()) {
    std::fprintf(stderr, "psctl %s: --scheduler=HOST:PORT is required\n", command.c_str());
    return 2;
  }
  const bool json = absl::GetFlag(FLAGS_json);
  if (command == "watch") {
    return Watch(EndpointOf(scheduler), {json, absl::Milliseconds(absl::GetFlag(FLAGS_interval_ms)),
                                         absl::GetFlag(FLAGS_count)});
  }
  if (command == "set-consistency") {
    return SetConsistency(EndpointOf(scheduler), absl::GetFlag(FLAGS_mode),
                          absl::GetFlag(FLAGS_staleness), json);
  }
  const ControlOptions options{json, absl::GetFlag(FLAGS_wait), absl::GetFlag(FLAGS_wait_s)};
  if (command == "drain-server") return DrainServer(EndpointOf(scheduler), operands[0], options);
  return Control(EndpointOf(scheduler), actions.at(command), options);
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "psctl status|watch|checkpoint|drain|stop --scheduler=HOST:PORT [--json]\n"
      "       psctl set-consistency --scheduler=HOST:PORT --mode=bsp|ssp|asp [--staleness=N]\n"
      "       psctl drain-server N --scheduler=HOST:PORT [--wait] [--json]\n"
      "       psctl status --target=HOST:PORT --role=server|worker [--json]\n"
      "       psctl export (--scheduler=HOST:PORT | --checkpoint_dir=DIR --job=FILE) --out=F\n"
      "       psctl plot --run_dir=DIR --out=FILE.png|.svg");
  std::vector<char*> args = pstrain::ParseFlagsOrExit(argc, argv);
  pstrain::CheckFlags();
  if (const absl::Status st = pstrain::ConfigureSecurityFromFlags(); !st.ok()) {
    std::fprintf(stderr, "psctl: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  const std::string command = args.size() >= 2 ? args[1] : "";
  const std::vector<std::string> operands(args.begin() + std::min<size_t>(args.size(), 2),
                                          args.end());
  if (command != "drain-server" && !operands.empty()) {
    std::fprintf(stderr, "psctl %s: unexpected operand '%s'\n", command.c_str(),
                 operands[0].c_str());
    return 2;
  }
  if (command == "export") return pstrain::ExportVerb();
  if (command == "plot")
    return pstrain::Plot(absl::GetFlag(FLAGS_run_dir), absl::GetFlag(FLAGS_out));
  if (command == "status") return pstrain::StatusVerb();
  if (const int code = pstrain::SchedulerVerb(command, operands); code >= 0) return code;
  std::fprintf(
      stderr, "psctl: %s\nusage: %s\n",
      args.size() < 2 ? "no command" : absl::StrCat("unknown command '", command, "'").c_str(),
      absl::ProgramUsageMessage().data());
  return 2;
}
