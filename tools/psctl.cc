// psctl: the operator's command-line client.
//
//   psctl status --scheduler=HOST:PORT [--json]
//       every member of the cluster: role, id, address, state, clock, ...
//   psctl status --target=HOST:PORT [--role=server|worker] [--json]
//       one daemon's own Status
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/rpc.h"
#include "common/security.h"
#include "common/status_json.h"
#include "proto/cluster.grpc.pb.h"
#include "proto/ps.grpc.pb.h"
#include "proto/worker.grpc.pb.h"

ABSL_FLAG(std::string, scheduler, "", "the scheduler's HOST:PORT");
ABSL_FLAG(std::string, target, "", "one daemon's HOST:PORT (instead of --scheduler)");
ABSL_FLAG(std::string, role, "server", "with --target: server or worker");
ABSL_FLAG(bool, json, false, "print JSON instead of a table");
ABSL_FLAG(int, timeout_s, 5, "seconds to wait for an answer");

namespace pstrain {
namespace {

std::string RoleName(Role r) {
  switch (r) {
    case SCHEDULER:
      return "scheduler";
    case SERVER:
      return "server";
    case WORKER:
      return "worker";
    default:
      return "?";
  }
}

std::string StateName(MemberState s) {
  switch (s) {
    case REGISTERED:
      return "registered";
    case RUNNING:
      return "running";
    case FINISHED:
      return "finished";
    case FAILED:
      return "failed";
    case DEAD:
      return "dead";
    default:
      return "?";
  }
}

std::string JobStateName(JobState s) {
  switch (s) {
    case WAITING:
      return "waiting for members";
    case RUNNING_JOB:
      return "running";
    case DONE:
      return "done";
    case ABORTED:
      return "aborted";
    default:
      return "?";
  }
}

std::string Bytes(int64_t b) {
  if (b >= (int64_t{1} << 30)) return absl::StrFormat("%.1fG", b / double(1 << 30));
  if (b >= (1 << 20)) return absl::StrFormat("%.1fM", b / double(1 << 20));
  if (b >= (1 << 10)) return absl::StrFormat("%.1fK", b / double(1 << 10));
  return absl::StrCat(b);
}

void PrintTable(const std::vector<NodeStatus>& rows) {
  std::printf("%-9s %3s %-21s %3s %3s %-10s %7s %9s %8s %8s %8s %8s %7s\n", "ROLE", "ID", "ADDRESS",
              "REP", "STG", "STATE", "CLOCK", "SAMPLES/S", "LOSS", "ACCURACY", "IN", "OUT", "RSS");
  for (const NodeStatus& n : rows) {
    const bool worker = n.role() == WORKER;
    std::printf(
        "%-9s %3s %-21s %3s %3s %-10s %7lld %9s %8s %8s %8s %8s %7s\n", RoleName(n.role()).c_str(),
        n.role() == SCHEDULER ? "-" : absl::StrCat(n.id()).c_str(), n.address().c_str(),
        worker ? absl::StrCat(n.replica()).c_str() : "-",
        worker ? absl::StrCat(n.stage()).c_str() : "-", StateName(n.state()).c_str(),
        static_cast<long long>(n.clock()),
        worker ? absl::StrFormat("%.0f", n.samples_per_s()).c_str() : "-",
        worker ? absl::StrFormat("%.4f", n.loss()).c_str() : "-",
        worker && n.test_accuracy() >= 0 ? absl::StrFormat("%.4f", n.test_accuracy()).c_str() : "-",
        Bytes(n.bytes_in()).c_str(), Bytes(n.bytes_out()).c_str(), Bytes(n.rss_bytes()).c_str());
    if (worker && n.clock() > 0) {
      std::printf(
          "          per clock: gate %.1f ms, pull %.1f ms, compute %.1f ms, push %.1f ms, %.1f "
          "calls, %s; peak device memory %s",
          n.gate_ms(), n.pull_ms(), n.compute_ms(), n.push_ms(), n.rpcs_per_clock(),
          Bytes(static_cast<int64_t>(n.bytes_per_clock())).c_str(),
          Bytes(n.peak_device_bytes()).c_str());
      if (n.activations_in_flight() > 0) {
        std::printf(
            "; stage %d of replica %d: %.0f%% waiting (%.1f ms for activations, %.1f ms for "
            "gradients), activations of %d micro-batches kept, %s of activations and %s of "
            "gradients sent",
            n.stage(), n.replica(), 100.0 * n.bubble(), n.activation_wait_ms(),
            n.gradient_wait_ms(), n.activations_in_flight(),
            Bytes(n.activation_bytes_sent()).c_str(), Bytes(n.gradient_bytes_sent()).c_str());
      }
      if (n.validation_loss() >= 0 && n.unigram_entropy() > 0) {
        std::printf("; validation loss %.4f (unigram entropy %.4f)", n.validation_loss(),
                    n.unigram_entropy());
      }
      std::printf("\n");
    }
    if (worker && n.clocks_trained() > 0) {
      const ClockSplit& r = n.run_split();
      const double clock_ms = 1e3 * n.train_s() / static_cast<double>(n.clocks_trained());
      std::printf(
          "          whole run: %lld clocks in %.1f s, %.2f ms each (gate %.2f, pull %.2f, "
          "compute %.2f, push %.2f, idle %.2f ms), %.1f calls, %s\n",
          static_cast<long long>(n.clocks_trained()), n.train_s(), clock_ms, r.gate_ms(),
          r.pull_ms(), r.compute_ms(), r.push_ms(),
          std::max(0.0, clock_ms - r.gate_ms() - r.pull_ms() - r.compute_ms() - r.push_ms()),
          r.rpcs(), Bytes(static_cast<int64_t>(r.bytes())).c_str());
    }
    if (n.role() == SERVER && n.params() > 0) {
      std::printf("          %lld params, %.2f bytes/param held, %lld non-finite pushes skipped\n",
                  static_cast<long long>(n.params()), n.bytes_per_param(),
                  static_cast<long long>(n.nonfinite_skipped()));
    }
    if (!n.message().empty()) std::printf("          %s\n", n.message().c_str());
    const int64_t now_ms = absl::ToUnixMillis(absl::Now());
    for (const Wait& w : n.waits()) {
      std::printf("          waiting %.1f s: %s\n", (now_ms - w.since_unix_ms()) / 1000.0,
                  w.what().c_str());
    }
  }
}

int PrintJson(const google::protobuf::Message& m) {
  const absl::StatusOr<std::string> out = StatusJson(m);
  if (!out.ok()) return 1;
  std::printf("%s", out->c_str());
  return 0;
}

int Fail(const std::string& address, const grpc::Status& st) {
  std::fprintf(stderr, "psctl: %s: %s (%s)\n", address.c_str(), st.error_message().c_str(),
               st.error_code() == grpc::StatusCode::UNAVAILABLE ? "is the daemon running?"
                                                                : "request failed");
  return 1;
}

int StatusOfCluster(const std::string& address) {
  auto stub = Scheduler::NewStub(MakeChannel(address));
  auto ctx = ContextWithTimeout(absl::Seconds(absl::GetFlag(FLAGS_timeout_s)));
  ClusterStatus st;
  const grpc::Status rpc = stub->Status(ctx.get(), StatusRequest(), &st);
  if (!rpc.ok()) return Fail(address, rpc);
  if (absl::GetFlag(FLAGS_json)) return PrintJson(st);
  const char* mode = st.consistency() == BSP ? "BSP" : st.consistency() == SSP ? "SSP" : "ASP";
  std::printf("job: %s, %s (staleness %d), %lld clocks", JobStateName(st.job_state()).c_str(), mode,
              st.staleness(), static_cast<long long>(st.total_clocks()));
  if (!st.message().empty()) std::printf(": %s", st.message().c_str());
  std::printf("\n");
  if (st.stages_size() > 1) {
    std::printf("pipeline: %d stages, %s, %d micro-batches:", st.stages_size(),
                st.pipeline_schedule() == GPIPE ? "GPipe" : "1F1B", st.micro_batches());
    for (const PipelineStage& s : st.stages()) {
      std::printf(" %d=%s (%.3g MFLOP/sample)", s.stage(), s.units().c_str(),
                  s.flops_per_sample() / 1e6);
    }
    std::printf("\n");
  }
  for (const Rollback& r : st.rollbacks()) {
    std::printf(
        "rollback to generation %lld: clock %lld -> %lld (%s), %s\n",
        static_cast<long long>(r.generation()), static_cast<long long>(r.from_clock()),
        static_cast<long long>(r.to_clock()), r.reason().c_str(),
        r.done_unix_ms() > 0
            ? absl::StrCat("restored in ", r.done_unix_ms() - r.begun_unix_ms(), " ms").c_str()
            : "servers restoring");
  }
  for (const PipelineRestart& r : st.pipeline_restarts()) {
    const std::string done =
        r.done_unix_ms() > 0 ? absl::StrCat("back to clock ", r.clock(), " in ",
                                            r.done_unix_ms() - r.begun_unix_ms(), " ms")
                             : std::string("waiting for its stages");
    std::printf("pipeline restart of replica %d (link epoch %lld): %s; %s\n", r.replica(),
                static_cast<long long>(r.link_epoch()), r.reason().c_str(), done.c_str());
  }
  std::vector<NodeStatus> rows = {st.scheduler()};
  rows.insert(rows.end(), st.members().begin(), st.members().end());
  PrintTable(rows);
  for (const NodeStatus& m : st.members()) {
    if (m.role() != SERVER || m.offload_disk_bytes() == 0) continue;
    std::printf(
        "server %d offloaded: %s of %s in memory; read %s (%.0f MB/s), wrote %s (%.0f MB/s)\n",
        m.id(), Bytes(m.offload_resident_bytes()).c_str(), Bytes(m.offload_disk_bytes()).c_str(),
        Bytes(m.offload_read_bytes()).c_str(), m.offload_read_mb_per_s(),
        Bytes(m.offload_write_bytes()).c_str(), m.offload_write_mb_per_s());
  }
  return 0;
}

int StatusOfDaemon(const std::string& address, const std::string& role) {
  NodeStatus st;
  auto ctx = ContextWithTimeout(absl::Seconds(absl::GetFlag(FLAGS_timeout_s)));
  grpc::Status rpc;
  if (role == "server") {
    rpc = ParameterServer::NewStub(MakeChannel(address))->Status(ctx.get(), StatusRequest(), &st);
  } else if (role == "worker") {
    rpc = Worker::NewStub(MakeChannel(address))->Status(ctx.get(), StatusRequest(), &st);
  } else {
    std::fprintf(stderr, "psctl: --role=%s: expected server or worker\n", role.c_str());
    return 2;
  }
  if (!rpc.ok()) return Fail(address, rpc);
  if (absl::GetFlag(FLAGS_json)) return PrintJson(st);
  PrintTable({st});
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "psctl status --scheduler=HOST:PORT [--json]\n"
      "       psctl status --target=HOST:PORT --role=server|worker [--json]");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (const absl::Status st = pstrain::ConfigureSecurityFromFlags(); !st.ok()) {
    std::fprintf(stderr, "psctl: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  if (args.size() != 2 || std::string(args[1]) != "status") {
    std::fprintf(stderr, "usage: psctl status --scheduler=HOST:PORT [--json]\n");
    return 2;
  }
  const std::string scheduler = absl::GetFlag(FLAGS_scheduler);
  const std::string target = absl::GetFlag(FLAGS_target);
  if (scheduler.empty() == target.empty()) {
    std::fprintf(stderr, "psctl status: give exactly one of --scheduler and --target\n");
    return 2;
  }
  return scheduler.empty() ? pstrain::StatusOfDaemon(target, absl::GetFlag(FLAGS_role))
                           : pstrain::StatusOfCluster(scheduler);
}
