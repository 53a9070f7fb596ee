// The gRPC path between hosts, and how it scales with servers: every
// daemon in a network namespace of its own (so no two share a host's
// loopback or shared memory), each joined to the host by a veth pair shaped
// to the same rate each way (tc tbf), the host forwarding between them. W
// workers train one model cut over S servers under BSP; for S = 1, 2, 4 the
// bench reports the aggregate push + pull throughput of a clock (every
// worker's payload bytes in and out over the slowest worker's training
// seconds) against S x the link rate: a BSP clock moves its pushes, then
// its pulls, so each server's link is busy one way at a time (pushes of
// the last layers and pulls of the first overlap a little, so a ratio a bit
// above 1 is possible). It also reports that no worker used shared memory.
// Needs root, iproute2 and tc. Prints JSON.
//
//   bazel run -c opt //bench:netns_bench -- [--rate_mbit=200] [--workers=4]
//       [--servers=1,2,4] [--clocks=20] [--rounds=1]
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/logging.h"
#include "tests/cluster.h"
#include "tests/netns.h"

ABSL_FLAG(int, rate_mbit, 200, "every link's rate each way, Mbit/s");
ABSL_FLAG(int, workers, 4, "workers (each in its own namespace)");
ABSL_FLAG(std::string, servers, "1,2,4", "server counts to run");
ABSL_FLAG(int, clocks, 20, "clocks per run");
ABSL_FLAG(int, rounds, 1, "rounds of every server count");

namespace pstrain {
namespace {

using testing::Cluster;
using testing::ClusterOptions;
using testing::Netns;

// One dense layer of 1024 x 1024 (4 MiB of fp32 weights), cut into 16
// chunks, so that 1, 2 and 4 servers hold equal shares.
std::string Job(int workers, int clocks) {
  return absl::StrCat(
      "name: 'netns_bench'\n"
      "model { input_dim: 1024 layers { type: DENSE units: 1024 } layers { type: SOFTMAX_XENT } }\n"
      "data { dataset: SYNTHETIC synthetic_dim: 1024 synthetic_classes: 1024 "
      "synthetic_test_size: 64 }\n"
      "optimizer { type: SGD learning_rate: 0.01 }\n"
      "consistency: BSP\nchunk_bytes: 262144\nbatch_size: ",
      8 * workers, "\nclocks: ", clocks, "\nnum_workers: ", workers, "\n");
}

struct Result {
  double mb_per_s = 0;  // aggregate payload MB/s of the clocks
  int64_t shm_bytes = 0;
};

absl::StatusOr<Result> RunOnce(int servers, int workers) {
  std::vector<std::unique_ptr<Netns>> spaces;
  for (int i = 0; i < servers + workers; ++i) {
    spaces.push_back(std::make_unique<Netns>(i));
    if (!spaces.back()->error().empty()) return absl::InternalError(spaces.back()->error());
    if (!spaces.back()->Shape(absl::GetFlag(FLAGS_rate_mbit))) {
      return absl::InternalError(spaces.back()->error());
    }
  }
  Cluster cluster(absl::StrCat("netns_bench_", servers));
  ClusterOptions o;
  o.job_text = Job(workers, absl::GetFlag(FLAGS_clocks));
  o.servers = servers;
  o.workers = workers;
  o.host = spaces[0]->host_ip();  // the scheduler, on the host
  for (int s = 0; s < servers; ++s) {
    o.server_each_prefix.push_back(spaces[s]->Prefix());
    o.server_host.push_back(spaces[s]->ns_ip());
  }
  for (int w = 0; w < workers; ++w) {
    o.worker_prefix.push_back(spaces[servers + w]->Prefix());
    o.worker_host.push_back(spaces[servers + w]->ns_ip());
  }
  if (absl::Status st = cluster.Start(o); !st.ok()) {
    return absl::InternalError(absl::StrCat(st.message(), cluster.Logs()));
  }
  absl::StatusOr<int> code = cluster.WaitAll(absl::Minutes(10));
  if (!code.ok() || *code != 0) return absl::InternalError(cluster.Logs());
  absl::StatusOr<ClusterStatus> st = cluster.FinalStatus();
  if (!st.ok()) return st.status();
  Result r;
  double bytes = 0, slowest = 0;
  for (int w = 0; w < workers; ++w) {
    const MemberStatus m = testing::MemberOf(*st, WORKER, w);
    // The clocks' bytes: the run's mean per clock times its clocks.
    bytes += m.worker().run_split().bytes() * m.worker().clocks_trained();
    slowest = std::max(slowest, m.worker().train_s());
    r.shm_bytes += m.shm_bytes();
  }
  r.mb_per_s = slowest > 0 ? bytes / slowest / 1e6 : 0;
  return r;
}

int Run() {
  if (const std::string why = Netns::Unavailable(); !why.empty()) {
    std::fprintf(stderr, "netns_bench: %s\n", why.c_str());
    return 2;
  }
  testing::HostForwarding forwarding;
  if (!forwarding.ok()) {
    std::fprintf(stderr, "netns_bench: cannot turn on IPv4 forwarding\n");
    return 2;
  }
  std::vector<int> counts;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_servers), ',')) {
    int s;
    if (!absl::SimpleAtoi(part, &s) || s < 1 || s > 16) {
      std::fprintf(stderr, "netns_bench: bad --servers entry\n");
      return 2;
    }
    counts.push_back(s);
  }
  const int workers = absl::GetFlag(FLAGS_workers);
  const double link_mb_per_s = absl::GetFlag(FLAGS_rate_mbit) / 8.0;
  std::string rows;
  for (int s : counts) {
    std::vector<double> runs;
    int64_t shm = 0;
    for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
      absl::StatusOr<Result> r = RunOnce(s, workers);
      if (!r.ok()) {
        std::fprintf(stderr, "netns_bench: %d servers: %s\n", s,
                     std::string(r.status().message()).c_str());
        return 1;
      }
      std::fprintf(stderr, "servers %d round %d: %.1f MB/s\n", s, round, r->mb_per_s);
      runs.push_back(r->mb_per_s);
      shm += r->shm_bytes;
    }
    std::sort(runs.begin(), runs.end());
    const double median = runs[runs.size() / 2];
    // S servers' links, one way at a time (see the top of this file).
    const double ceiling = s * link_mb_per_s;
    absl::StrAppend(&rows, rows.empty() ? "" : ",\n",
                    absl::StrFormat("    {\"servers\": %d, \"mb_per_s\": %.1f, \"range\": [%.1f, "
                                    "%.1f], \"ceiling_mb_per_s\": %.1f, \"of_ceiling\": %.3f, "
                                    "\"shm_bytes\": %d}",
                                    s, median, runs.front(), runs.back(), ceiling,
                                    median / ceiling, shm));
  }
  std::printf(
      "{\n  \"bench\": \"netns_bench\",\n  \"workers\": %d,\n  \"rate_mbit\": %d,\n"
      "  \"clocks\": %d,\n  \"runs\": [\n%s\n  ],\n"
      "  \"unit\": \"MB/s of payload, every worker's in + out over the slowest worker's "
      "training seconds; ceiling servers x link rate\"\n}\n",
      workers, absl::GetFlag(FLAGS_rate_mbit), absl::GetFlag(FLAGS_clocks), rows.c_str());
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  pstrain::LogToStderr();
  absl::ParseCommandLine(argc, argv);
  return pstrain::Run();
}
