// Rows of a sparse table pulled and pushed through real servers
// (ParameterServer.PullRows/PushRows, worker/row_client.h), against the same
// servers' table operations in process (server/sparse_tables.h, no RPC),
// measured in the same run, interleaved round by round. A round: one batch
// of --ids distinct 64-bit ids (rows of --width floats, drawn from a pool
// of 8x as many random ids) pulled and its gradients pushed, through the
// servers and in process. Reported per
// server count: rows per second each way, the median of the paired ratios
// (through the servers / in process) and its range, and the rows made.
// Prints one JSON object.
//
//   bazel build -c opt //bench:sparse_bench
//   TEST_SRCDIR=$PWD/bazel-bin/bench/sparse_bench.runfiles TEST_WORKSPACE=pstrain
//     bazel-bin/bench/sparse_bench [--rounds=7] [--ids=4096] [--width=64] [--servers=1,2]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/job_spec.h"
#include "common/status_macros.h"
#include "proto/cluster.pb.h"
#include "server/sparse_table.h"
#include "server/sparse_tables.h"
#include "tests/cluster.h"
#include "tests/wait.h"
#include "worker/row_client.h"

ABSL_FLAG(int, rounds, 7, "interleaved rounds per server count");
ABSL_FLAG(int, ids, 4096, "distinct ids a batch pulls and pushes");
ABSL_FLAG(int, width, 64, "floats a row");
ABSL_FLAG(std::string, servers, "1,2", "server counts to measure");

namespace pstrain {
namespace {

using Clock = std::chrono::steady_clock;
using testing::Cluster;
using testing::ClusterOptions;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::string JobText(int width) {
  return absl::StrCat(R"pb(
    model {
      layers { type: DENSE units: 16 }
      layers { type: SOFTMAX_XENT }
    }
    data { dataset: SYNTHETIC synthetic_dim: 8 synthetic_classes: 16 }
    consistency: ASP
    clocks: 100000000
    seed: 5
    tables { name: "emb" optimizer { type: ADAGRAD learning_rate: 0.1 } width: )pb",
                      width, " }\n");
}

struct Measured {
  int servers = 0;
  std::vector<double> served_rows_per_s, local_rows_per_s, ratio;
  int64_t rows_held = 0;  // every row made on the servers by the end
};

// Seconds to pull `ids` and push gradients for them through `pull`, `push`.
template <typename Pull, typename Push>
double Batch(const std::vector<uint64_t>& ids, const std::vector<float>& grads, Pull pull,
             Push push) {
  std::vector<float> rows;
  const Clock::time_point t0 = Clock::now();
  if (!pull(ids, &rows).ok() || !push(ids, grads).ok()) {
    std::fprintf(stderr, "sparse_bench: a batch failed\n");
    std::exit(1);
  }
  return Since(t0);
}

absl::StatusOr<Measured> Measure(int servers) {
  const int width = absl::GetFlag(FLAGS_width), n = absl::GetFlag(FLAGS_ids);
  Cluster cluster(absl::StrCat("sparse_bench_", servers));
  ClusterOptions o;
  o.job_text = JobText(width);
  o.servers = servers;
  o.workers = 1;  // slowed: the job runs while the bench uses its servers
  o.worker_flags = {{"--debug_slowdown_ms=200"}};
  if (absl::Status st = cluster.Start(o); !st.ok()) return st;
  if (!testing::WaitForStatus(
          cluster.scheduler_address(),
          [](const ClusterStatus& st) { return testing::SlowestClock(st) >= 1; },
          absl::Seconds(60))) {
    return absl::DeadlineExceededError("the job did not start:\n" + cluster.Logs());
  }
  ASSIGN_OR_RETURN(const ClusterStatus st, testing::SchedulerStatus(cluster.scheduler_address()));
  std::vector<std::string> addresses;
  for (int id = 0; id < servers; ++id) addresses.push_back(testing::MemberOf(st, SERVER, id).address());
  absl::StatusOr<JobSpec> job = ParseJobSpecText(o.job_text, "sparse_bench");
  if (!job.ok()) return job.status();
  ApplyJobDefaults(&*job);
  job->set_num_servers(servers);
  RowClient client(*job, addresses, 0);
  // In process: every server's part of the table, each id to its own.
  std::vector<std::unique_ptr<SparseTables>> local;
  for (int s = 0; s < servers; ++s) local.push_back(std::make_unique<SparseTables>(*job, s, servers));
  int64_t local_clock = 0, served_clock = 0;  // each side's iterations (one push each)
  auto local_pull = [&](const std::vector<uint64_t>& ids, std::vector<float>* rows) {
    std::vector<std::vector<uint64_t>> mine(servers);
    for (uint64_t id : ids) mine[ServerOfRow(id, servers)].push_back(id);
    std::vector<float> part;
    rows->clear();
    for (int s = 0; s < servers; ++s) {
      RETURN_IF_ERROR(local[s]->Pull(0, "emb", mine[s], &part));
      rows->insert(rows->end(), part.begin(), part.end());
    }
    return absl::OkStatus();
  };
  auto local_push = [&](const std::vector<uint64_t>& ids, const std::vector<float>& grads) {
    std::vector<std::vector<uint64_t>> mine(servers);
    std::vector<std::vector<float>> part(servers);
    for (size_t i = 0; i < ids.size(); ++i) {
      const int s = ServerOfRow(ids[i], servers);
      mine[s].push_back(ids[i]);
      part[s].insert(part[s].end(), grads.begin() + i * width, grads.begin() + (i + 1) * width);
    }
    for (int s = 0; s < servers; ++s) {
      RETURN_IF_ERROR(local[s]->Push(0, "emb", local_clock, 1, mine[s], part[s]));
    }
    ++local_clock;
    return absl::OkStatus();
  };
  auto served_pull = [&](const std::vector<uint64_t>& ids, std::vector<float>* rows) {
    return client.Pull("emb", served_clock, ids, rows);
  };
  auto served_push = [&](const std::vector<uint64_t>& ids, const std::vector<float>& grads) {
    return client.Push("emb", served_clock++, 1, ids, grads);
  };
  // Each batch: n distinct ids of a pool of 8n, so that after the first
  // rounds most rows exist (a pull makes the others).
  std::mt19937_64 rng(servers);
  std::vector<uint64_t> pool(8 * static_cast<size_t>(n));
  for (uint64_t& id : pool) id = rng();
  std::vector<float> grads(static_cast<size_t>(n) * width, 0.01f);
  Measured m;
  m.servers = servers;
  const int rounds = absl::GetFlag(FLAGS_rounds);
  for (int r = -1; r < rounds; ++r) {  // round -1 warms both up
    std::shuffle(pool.begin(), pool.end(), rng);
    const std::vector<uint64_t> ids(pool.begin(), pool.begin() + n);
    const double served = Batch(ids, grads, served_pull, served_push);
    const double in_process = Batch(ids, grads, local_pull, local_push);
    if (r < 0) continue;
    m.served_rows_per_s.push_back(2.0 * n / served);
    m.local_rows_per_s.push_back(2.0 * n / in_process);
    m.ratio.push_back(in_process / served);
  }
  for (int s = 0; s < servers; ++s) {
    for (const TableStatus& t : local[s]->Status()) m.rows_held += t.rows();
  }
  return m;
}

int Main() {
  const int width = absl::GetFlag(FLAGS_width), n = absl::GetFlag(FLAGS_ids);
  std::vector<Measured> all;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_servers), ',')) {
    int servers = 0;
    if (!absl::SimpleAtoi(part, &servers) || servers < 1 || servers > 16) {
      std::fprintf(stderr, "sparse_bench: bad --servers entry '%s'\n", std::string(part).c_str());
      return 2;
    }
    absl::StatusOr<Measured> m = Measure(servers);
    if (!m.ok()) {
      std::fprintf(stderr, "sparse_bench: %s\n", std::string(m.status().message()).c_str());
      return 1;
    }
    all.push_back(*m);
  }
  std::printf("{\n  \"bench\": \"sparse_bench\",\n  \"ids_per_batch\": %d,\n  \"width\": %d,\n", n,
              width);
  std::printf("  \"rounds\": %d,\n  \"servers\": [\n", absl::GetFlag(FLAGS_rounds));
  for (size_t k = 0; k < all.size(); ++k) {
    const Measured& m = all[k];
    std::printf(
        "    {\"servers\": %d, \"served_rows_per_s\": %.4g, \"in_process_rows_per_s\": %.4g, "
        "\"served_vs_in_process\": %.3f, \"served_vs_in_process_range\": [%.3f, %.3f], "
        "\"rows_made\": %lld}%s\n",
        m.servers, Median(m.served_rows_per_s), Median(m.local_rows_per_s), Median(m.ratio),
        *std::min_element(m.ratio.begin(), m.ratio.end()),
        *std::max_element(m.ratio.begin(), m.ratio.end()), static_cast<long long>(m.rows_held),
        k + 1 < all.size() ? "," : "");
  }
  std::printf(
      "  ],\n  \"note\": \"rows per second each way (a pull and a push of every id count 2); "
      "served: through the servers over gRPC on loopback (worker/row_client.h), in process: "
      "the same servers' SparseTables called directly; ratios are medians of paired rounds; "
      "the requests carry the ids and rows as protobuf fields (copied once each way)\"\n}\n");
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return pstrain::Main();
}
