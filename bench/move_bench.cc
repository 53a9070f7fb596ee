// A move of the placement measured (issue 70, docs/operating.md "Adding a
// server to a running job"): a BSP job of 2 servers and 2 ps_workers (one
// dense layer of --mib MiB of fp32 weights, Adam), grown to 3 servers by a
// ps_server --join once the slowest worker reaches clock --at, next to the
// same job undisturbed; the two run in turn, --rounds pairs. Per pair:
//
//   throughput: the undisturbed run's seconds for the --window clocks from
//     --at over the grown run's for the same clocks (1: the move cost
//     nothing; the goal is >= 0.8);
//   move rate: the bytes handed over (weights and optimizer state of the
//     chunks that changed server, MoveRecord.handed_over_bytes) over the
//     handover's transfer time (MoveRecord.handover_ms: from the first
//     answering call's start, the state settled at the switch clock, to
//     the last answer), over the transport's push bandwidth -- a PsClient push of a
//     tensor of those bytes to one ps_server, as bench/transport_bench
//     measures it -- measured right after the pair (the goal is >= 0.5).
//     The time from the ask to every server under the new placement is
//     printed too (move_s: it holds the clocks the workers train to the
//     switch clock).
//
// Prints one JSON object: the medians of the paired ratios, their ranges,
// and each pair's figures. The servers beat every 200 ms (tests/cluster.h),
// every 20 ms while the move runs (the scheduler asks it).
//
//   bazel run -c opt //bench:move_bench -- [--mib=16] [--rounds=3] [--at=20] [--window=20]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/params.h"
#include "common/partition.h"
#include "common/status_macros.h"
#include "proto/status.pb.h"
#include "tests/cluster.h"
#include "tests/wait.h"
#include "worker/ps_client.h"

ABSL_FLAG(int, mib, 16, "the dense layer's fp32 weights, MiB");
ABSL_FLAG(int, rounds, 3, "pairs of runs (undisturbed, grown), in turn");
ABSL_FLAG(int, at, 20, "the slowest worker's clock at which the server joins");
ABSL_FLAG(int, window, 20, "clocks measured from --at");

namespace pstrain {
namespace {

using testing::Cluster;
using testing::ClusterOptions;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::string Range(const std::vector<double>& v) {
  if (v.empty()) return "[]";
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return absl::StrCat("[", *lo, ", ", *hi, "]");
}

// One dense layer of `floats` weights (plus a 512 bias) over synthetic
// data: `clocks` clocks, BSP, Adam, checkpoints into `checkpoints` (a move
// switches through one).
std::string JobText(int64_t floats, int64_t clocks, const std::string& checkpoints) {
  const int64_t in = floats / 512;
  return absl::StrCat(
      "name: 'move_bench'\nmodel { input_dim: ", in,
      " layers { type: DENSE units: 512 } layers { type: SOFTMAX_XENT } }\n"
      "data { dataset: SYNTHETIC synthetic_dim: ",
      in,
      " synthetic_classes: 512 }\n"
      "optimizer { type: ADAM learning_rate: 1e-4 }\nconsistency: BSP\nbatch_size: 32\n"
      "seed: 3\nclocks: ",
      clocks, "\nchunk_bytes: 1048576\ncheckpoint_every: 100000\ncheckpoint_dir: '", checkpoints,
      "'\n");
}

// Seconds between the slowest worker reaching clock `from` and clock
// `to`, polling the scheduler; `at_from` runs once at `from`.
absl::StatusOr<double> TimeClocks(const std::string& scheduler, int64_t from, int64_t to,
                                  const std::function<absl::Status()>& at_from) {
  using Clock = std::chrono::steady_clock;
  if (!testing::WaitForStatus(
          scheduler, [&](const ClusterStatus& st) { return testing::SlowestClock(st) >= from; },
          absl::Minutes(5), absl::Milliseconds(10))) {
    return absl::DeadlineExceededError(absl::StrCat("clock ", from, " not reached"));
  }
  const Clock::time_point t0 = Clock::now();
  RETURN_IF_ERROR(at_from());
  if (!testing::WaitForStatus(
          scheduler, [&](const ClusterStatus& st) { return testing::SlowestClock(st) >= to; },
          absl::Minutes(5), absl::Milliseconds(10))) {
    return absl::DeadlineExceededError(absl::StrCat("clock ", to, " not reached"));
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Run {
  double window_s = 0;
  int64_t moved_bytes = 0;
  double move_s = 0;  // ask -> every server restored under the new placement
  int64_t handed_bytes = 0;
  double handover_s = 0;  // the handover's transfer time
};

// The job run once; with `grow`, a server joins at --at.
absl::StatusOr<Run> RunJob(bool grow, int round) {
  const int64_t floats = int64_t{absl::GetFlag(FLAGS_mib)} << 18;
  const int at = absl::GetFlag(FLAGS_at), window = absl::GetFlag(FLAGS_window);
  Cluster cluster(absl::StrCat("move_bench_", grow ? "grown_" : "undisturbed_", round));
  ClusterOptions o;
  o.job_text = JobText(floats, at + window + 5, cluster.dir() + "/checkpoints");
  o.servers = 2;
  o.workers = 2;
  RETURN_IF_ERROR(cluster.Start(o));
  Run run;
  ASSIGN_OR_RETURN(run.window_s, TimeClocks(cluster.scheduler_address(), at, at + window, [&] {
                     return grow ? cluster.AddServer({"--join"}) : absl::OkStatus();
                   }));
  absl::StatusOr<int> code = cluster.WaitAll(absl::Minutes(5));
  if (!code.ok() || *code != 0) {
    return absl::InternalError(absl::StrCat("the job failed; logs in ", cluster.dir()));
  }
  ASSIGN_OR_RETURN(const ClusterStatus end, cluster.FinalStatus());
  if (!grow) return run;
  const PlacementStatus& p = end.placement();
  if (p.history_size() != 1 || !p.history(0).abandoned().empty() || end.rollbacks_size() != 1) {
    return absl::InternalError(
        absl::StrCat("the move did not switch once; logs in ", cluster.dir()));
  }
  run.moved_bytes = p.history(0).bytes();
  run.move_s = (end.rollbacks(0).done_unix_ms() - p.history(0).begun_unix_ms()) / 1e3;
  run.handed_bytes = p.history(0).handed_over_bytes();
  run.handover_s = p.history(0).handover_ms() / 1e3;
  return run;
}

// GB/s of one worker's pushes of `bytes` of fp32 gradients to one
// ps_server over loopback (PsClient, as bench/transport_bench).
absl::StatusOr<double> PushBandwidth(int64_t bytes) {
  using Clock = std::chrono::steady_clock;
  Cluster cluster("move_bench_transport");
  ClusterOptions o;
  o.job_text =
      absl::StrCat("name: 'move_bench_transport'\nmodel { input_dim: ", bytes / 4 / 512,
                   " layers { type: DENSE units: 512 } layers { type: SOFTMAX_XENT } }\n"
                   "data { dataset: SYNTHETIC synthetic_dim: ",
                   bytes / 4 / 512,
                   " synthetic_classes: 512 }\noptimizer { type: SGD learning_rate: 1e-9 }\n"
                   "consistency: ASP\nbatch_size: 64\nclocks: 100000000\nchunk_bytes: 1048576\n");
  o.servers = 1;
  o.workers = 0;  // this process is the worker
  o.scheduler_flags = {"--num_workers=1"};
  RETURN_IF_ERROR(cluster.Start(o));
  ASSIGN_OR_RETURN(testing::InProcessWorker worker,
                   testing::JoinAsWorker(cluster.scheduler_address()));
  const std::vector<ParamInfo> params = ModelParams(worker.job.model());
  ASSIGN_OR_RETURN(const Partition partition, Partition::Make(params, worker.job.chunk_bytes(), 1));
  PsClientOptions popts;
  popts.shm = false;  // a move's bytes cross hosts: the network path
  PsClient ps(worker.cluster, &partition, worker.id, popts);
  std::vector<std::vector<float>> grads, weights;
  int64_t total = 0;
  for (const ParamInfo& p : params) {
    grads.emplace_back(p.numel, 1e-6f);
    weights.emplace_back(p.numel, 0.0f);
    total += p.numel * 4;
  }
  RETURN_IF_ERROR(ps.Pull(0, 0, &weights));
  int64_t clock = 0;
  RETURN_IF_ERROR(ps.Push(clock++, 64, grads));  // warm
  const Clock::time_point t0 = Clock::now();
  double elapsed = 0;
  int reps = 0;
  while (elapsed < 1.0 || reps < 3) {
    RETURN_IF_ERROR(ps.Push(clock++, 64, grads));
    ++reps;
    elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  worker.Finish();
  (void)cluster.WaitAll(absl::Seconds(30));
  return static_cast<double>(total) * reps / elapsed / 1e9;
}

absl::Status Main() {
  std::vector<double> throughput, rate, push_gbs, move_gbs, move_s, moved_bytes;
  for (int r = 0; r < absl::GetFlag(FLAGS_rounds); ++r) {
    ASSIGN_OR_RETURN(const Run undisturbed, RunJob(false, r));
    ASSIGN_OR_RETURN(const Run grown, RunJob(true, r));
    ASSIGN_OR_RETURN(const double push,
                     PushBandwidth(std::max<int64_t>(grown.handed_bytes, 1 << 22)));
    // (A handover within a millisecond counts as one.)
    const double moved = grown.handed_bytes / std::max(grown.handover_s, 1e-3) / 1e9;
    throughput.push_back(undisturbed.window_s / grown.window_s);
    rate.push_back(moved / push);
    push_gbs.push_back(push);
    move_gbs.push_back(moved);
    move_s.push_back(grown.move_s);
    moved_bytes.push_back(static_cast<double>(grown.handed_bytes));
    std::fprintf(stderr,
                 "round %d: window %.3f s undisturbed, %.3f s grown; handed over %lld bytes in "
                 "%.3f s (%.3f GB/s), push %.3f GB/s; %.3f s from the ask to the new placement\n",
                 r, undisturbed.window_s, grown.window_s,
                 static_cast<long long>(grown.handed_bytes), grown.handover_s, moved, push,
                 grown.move_s);
  }
  std::printf(
      "{\"bench\": \"move_bench\", \"mib\": %d, \"at\": %d, \"window\": %d, \"rounds\": %d,\n"
      " \"throughput_during_move_vs_undisturbed\": {\"median\": %.4f, \"range\": %s, \"goal\": "
      "0.8},\n"
      " \"move_rate_vs_push_bandwidth\": {\"median\": %.4f, \"range\": %s, \"goal\": 0.5},\n"
      " \"move_gb_per_s\": [%s], \"push_gb_per_s\": [%s], \"move_s\": [%s], \"moved_bytes\": "
      "[%s]}\n",
      absl::GetFlag(FLAGS_mib), absl::GetFlag(FLAGS_at), absl::GetFlag(FLAGS_window),
      absl::GetFlag(FLAGS_rounds), Median(throughput), Range(throughput).c_str(), Median(rate),
      Range(rate).c_str(), absl::StrJoin(move_gbs, ", ").c_str(),
      absl::StrJoin(push_gbs, ", ").c_str(), absl::StrJoin(move_s, ", ").c_str(),
      absl::StrJoin(moved_bytes, ", ").c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const absl::Status st = pstrain::Main();
  if (!st.ok()) {
    std::fprintf(stderr, "move_bench: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  return 0;
}
