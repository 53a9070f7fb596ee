// End-to-end training speed with a parameter server in the loop, next to
// the same job trained in one process, back to back in one invocation:
//
//   (a) alone:   ps_worker --standalone (the servers' store and optimizer in
//                the worker's process, no RPC) -- the ceiling
//   (b) bsp_1x1: 1 worker + 1 server on loopback, BSP
//   (c) ssp1:    the same under SSP with staleness 1
//   (d) bsp_2x2: 2 workers + 2 servers, BSP
//   (e) bsp_2x2_standby: the same with a standby copy of every chunk
//                (--standby_copies=1; docs/failures.md), also against (d)
//
// Each round runs the four in that order (so the ceiling and the clusters
// share the machine's moods); samples/s = clocks x global batch / the
// seconds the clocks took (from the workers' final Status: the first clock,
// which waits for the cluster, and evaluations left out; with two workers,
// the slower one's). Prints JSON: per configuration the median samples/s,
// the median and range of its per-round ratio to (a), and worker 0's
// median per-clock split (gate, pull, compute, push, idle ms; calls and
// bytes).
//
//   bazel run -c opt //bench:train_bench -- [--model=mlp|gpt | --job=FILE]
//       [--rounds=3] [--clocks=N] [--worker_flags="--overlap=on ..."]
//       [--server_flags="--rpc_threads=2 ..."]
//       [--only=alone,bsp_1x1,ssp1_1x1,bsp_2x2,bsp_2x2_standby]
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "tests/cluster.h"

ABSL_FLAG(std::string, model, "mlp",
          "mlp (deploy/jobs/mlp_fashion_mnist.pbtxt) or gpt (deploy/jobs/gpt_fortunes.pbtxt)");
ABSL_FLAG(std::string, job, "",
          "a job spec to run instead of --model's (its servers and workers set per run)");
ABSL_FLAG(int, rounds, 3, "rounds of the four configurations");
ABSL_FLAG(int64_t, clocks, 0, "clocks per run (0: 1000 for the MLP, 100 for the GPT)");
ABSL_FLAG(std::string, worker_flags, "", "flags for every worker, standalone included");
ABSL_FLAG(std::string, server_flags, "", "flags for every server");
ABSL_FLAG(std::string, only, "", "run only these configurations (comma-separated names)");

namespace pstrain {
namespace {

using testing::Cluster;
using testing::ClusterOptions;
using testing::Process;

struct Config {
  std::string name;
  int workers = 0, servers = 0;  // 0: standalone
  std::vector<std::string> scheduler_flags;
};

// One run's outcome: training samples/s and worker 0's split per clock.
struct Run {
  double samples_per_s = 0;
  ClockSplit split;
  double clock_ms = 0;
  double replicated_bytes_per_clock = 0;  // the servers' to their standbys
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

absl::StatusOr<Run> FromWorkers(const JobSpec& job, const std::vector<MemberStatus>& workers) {
  Run run;
  double slowest = 0;
  int64_t clocks = 0;
  for (const MemberStatus& w : workers) {
    if (w.state() != FINISHED || w.worker().clocks_trained() <= 0) {
      return absl::InternalError(absl::StrCat("worker ", w.id(), " did not finish: ", w.message()));
    }
    slowest = std::max(slowest, w.worker().train_s());
    clocks = w.worker().clocks_trained();
  }
  run.samples_per_s = static_cast<double>(clocks) * job.batch_size() / slowest;
  run.clock_ms = 1000 * slowest / static_cast<double>(clocks);
  run.split = workers.front().worker().run_split();
  return run;
}

absl::StatusOr<Run> RunAlone(const JobSpec& job, const std::vector<std::string>& worker_flags) {
  const std::string dir = testing::NewTempDir("train_bench_alone");
  std::string text;
  google::protobuf::TextFormat::PrintToString(job, &text);
  testing::WriteFile(dir + "/job.pbtxt", text);
  std::vector<std::string> argv = {testing::BinaryPath("worker/ps_worker"), "--standalone",
                                   "--job=" + dir + "/job.pbtxt",
                                   "--status_file=" + dir + "/status.json"};
  argv.insert(argv.end(), worker_flags.begin(), worker_flags.end());
  ASSIGN_OR_RETURN(Process p, Process::Start(argv, dir + "/worker.log"));
  ASSIGN_OR_RETURN(const int code, p.Wait(absl::Minutes(10)));
  MemberStatus st;
  if (code != 0 ||
      !google::protobuf::util::JsonStringToMessage(testing::ReadFile(dir + "/status.json"), &st)
           .ok()) {
    return absl::InternalError(absl::StrCat("standalone worker exit ", code, ":\n", p.Log()));
  }
  return FromWorkers(job, {st});
}

absl::StatusOr<Run> RunCluster(const JobSpec& job, const Config& c,
                               const std::vector<std::string>& worker_flags) {
  Cluster cluster("train_bench_" + c.name);
  ClusterOptions o;
  google::protobuf::TextFormat::PrintToString(job, &o.job_text);
  o.servers = c.servers;
  o.workers = c.workers;
  o.scheduler_flags = c.scheduler_flags;
  o.worker_flags.assign(c.workers, worker_flags);
  o.server_flags = absl::StrSplit(absl::GetFlag(FLAGS_server_flags), ' ', absl::SkipEmpty());
  RETURN_IF_ERROR(cluster.Start(o));
  ASSIGN_OR_RETURN(const int code, cluster.WaitAll(absl::Minutes(10)));
  ASSIGN_OR_RETURN(const ClusterStatus st, cluster.FinalStatus());
  if (code != 0) return absl::InternalError(absl::StrCat("scheduler exit ", code, cluster.Logs()));
  std::vector<MemberStatus> workers;
  for (int w = 0; w < c.workers; ++w) workers.push_back(testing::MemberOf(st, WORKER, w));
  ASSIGN_OR_RETURN(Run run, FromWorkers(job, workers));
  int64_t replicated = 0;
  for (int s = 0; s < c.servers; ++s) {
    replicated += testing::MemberOf(st, SERVER, s).server().standby().replicated_bytes();
  }
  run.replicated_bytes_per_clock = static_cast<double>(replicated) / job.clocks();
  return run;
}

absl::StatusOr<JobSpec> BenchJob() {
  const bool gpt = absl::GetFlag(FLAGS_model) == "gpt";
  if (!gpt && absl::GetFlag(FLAGS_model) != "mlp") {
    return absl::InvalidArgumentError("--model: expected mlp or gpt");
  }
  std::string path = absl::GetFlag(FLAGS_job);
  if (path.empty()) {
    path = gpt ? "deploy/jobs/gpt_fortunes.pbtxt" : "deploy/jobs/mlp_fashion_mnist.pbtxt";
  }
  ASSIGN_OR_RETURN(JobSpec job, LoadJobSpec(path));
  int64_t clocks = absl::GetFlag(FLAGS_clocks);
  if (clocks <= 0) clocks = gpt ? 100 : 1000;
  job.set_epochs(0);
  job.set_clocks(clocks);
  job.set_log_every(static_cast<int>(std::max<int64_t>(1, clocks / 5)));
  ApplyJobDefaults(&job);
  RETURN_IF_ERROR(ValidateJobSpec(job));
  return job;
}

std::string SplitJson(const std::vector<Run>& runs) {
  auto med = [&](auto field) {
    std::vector<double> v;
    for (const Run& r : runs) v.push_back(field(r));
    return Median(v);
  };
  const double gate = med([](const Run& r) { return r.split.gate_ms(); });
  const double pull = med([](const Run& r) { return r.split.pull_ms(); });
  const double compute = med([](const Run& r) { return r.split.compute_ms(); });
  const double push = med([](const Run& r) { return r.split.push_ms(); });
  const double clock = med([](const Run& r) { return r.clock_ms; });
  return absl::StrFormat(
      "{\"clock_ms\": %.3f, \"gate_ms\": %.3f, \"pull_ms\": %.3f, \"compute_ms\": %.3f, "
      "\"push_ms\": %.3f, \"idle_ms\": %.3f, \"calls\": %.2f, \"bytes\": %.0f}",
      clock, gate, pull, compute, push, std::max(0.0, clock - gate - pull - compute - push),
      med([](const Run& r) { return r.split.rpcs(); }),
      med([](const Run& r) { return r.split.bytes(); }));
}

int Main() {
  absl::StatusOr<JobSpec> job = BenchJob();
  if (!job.ok()) {
    std::fprintf(stderr, "train_bench: %s\n", std::string(job.status().message()).c_str());
    return 2;
  }
  const std::vector<std::string> worker_flags =
      absl::StrSplit(absl::GetFlag(FLAGS_worker_flags), ' ', absl::SkipEmpty());
  std::vector<Config> configs = {
      {"alone", 0, 0, {}},
      {"bsp_1x1", 1, 1, {"--consistency=bsp"}},
      {"ssp1_1x1", 1, 1, {"--consistency=ssp", "--staleness=1"}},
      {"bsp_2x2", 2, 2, {"--consistency=bsp"}},
      {"bsp_2x2_standby", 2, 2, {"--consistency=bsp", "--standby_copies=1"}},
  };
  const std::string only = absl::GetFlag(FLAGS_only);
  if (!only.empty()) {
    const std::vector<std::string> names = absl::StrSplit(only, ',');
    configs.erase(std::remove_if(configs.begin(), configs.end(),
                                 [&](const Config& c) {
                                   return std::find(names.begin(), names.end(), c.name) ==
                                          names.end();
                                 }),
                  configs.end());
  }
  std::map<std::string, std::vector<Run>> runs;
  for (int r = 0; r < absl::GetFlag(FLAGS_rounds); ++r) {
    for (const Config& c : configs) {
      absl::StatusOr<Run> run =
          c.workers == 0 ? RunAlone(*job, worker_flags) : RunCluster(*job, c, worker_flags);
      if (!run.ok()) {
        std::fprintf(stderr, "train_bench: %s: %s\n", c.name.c_str(),
                     std::string(run.status().message()).c_str());
        return 1;
      }
      std::fprintf(stderr, "round %d %s: %.0f samples/s\n", r, c.name.c_str(), run->samples_per_s);
      runs[c.name].push_back(*run);
    }
  }
  std::vector<std::string> out;
  for (const Config& c : configs) {
    const std::vector<Run>& rs = runs[c.name];
    std::vector<double> sps, ratio, replicated, vs_plain;
    for (size_t r = 0; r < rs.size(); ++r) {
      sps.push_back(rs[r].samples_per_s);
      replicated.push_back(rs[r].replicated_bytes_per_clock);
      if (runs.count("alone") > 0)
        ratio.push_back(rs[r].samples_per_s / runs["alone"][r].samples_per_s);
      if (c.name == "bsp_2x2_standby" && runs.count("bsp_2x2") > 0) {
        vs_plain.push_back(rs[r].samples_per_s / runs["bsp_2x2"][r].samples_per_s);
      }
    }
    std::string entry = absl::StrFormat("    \"%s\": {\"samples_per_s\": %.0f, \"split\": %s",
                                        c.name, Median(sps), SplitJson(rs));
    if (!ratio.empty()) {
      absl::StrAppendFormat(&entry, ", \"vs_alone\": %.3f, \"vs_alone_range\": [%.3f, %.3f]",
                            Median(ratio), *std::min_element(ratio.begin(), ratio.end()),
                            *std::max_element(ratio.begin(), ratio.end()));
    }
    if (Median(replicated) > 0) {
      absl::StrAppendFormat(&entry, ", \"replicated_bytes_per_clock\": %.0f", Median(replicated));
    }
    if (!vs_plain.empty()) {
      absl::StrAppendFormat(&entry, ", \"vs_bsp_2x2\": %.3f, \"vs_bsp_2x2_range\": [%.3f, %.3f]",
                            Median(vs_plain), *std::min_element(vs_plain.begin(), vs_plain.end()),
                            *std::max_element(vs_plain.begin(), vs_plain.end()));
    }
    out.push_back(entry + "}");
  }
  std::printf(
      "{\n  \"bench\": \"train_bench\",\n  \"job\": \"%s\",\n  \"clocks\": %lld,\n"
      "  \"batch_size\": %d,\n  \"rounds\": %d,\n  \"worker_flags\": \"%s\",\n  \"runs\": {\n%s\n  "
      "}\n}\n",
      job->name().c_str(), static_cast<long long>(job->clocks()), job->batch_size(),
      absl::GetFlag(FLAGS_rounds), absl::GetFlag(FLAGS_worker_flags).c_str(),
      absl::StrJoin(out, ",\n").c_str());
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  pstrain::LogToStderr();
  absl::ParseCommandLine(argc, argv);
  return pstrain::Main();
}
