// Rows of a sparse table pulled and pushed through real servers
// (ParameterServer.PullRows/PushRows, worker/row_client.h), against the same
// servers' table operations in process (server/sparse_tables.h, no RPC),
// and against the same table as a dense parameter (the pool's rows as one
// tensor, pushed and pulled whole through worker/ps_client.h, as a worker
// without sparse tables would each clock), measured in the same run,
// interleaved round by round. A round: one batch of --ids distinct 64-bit
// ids (rows of --width floats, drawn from a pool of 8x as many random ids)
// pulled and its gradients pushed, through the servers and in process; and
// one dense push and pull of the pool's rows. This process is the job's
// only worker. Reported per server count: rows per second each way, the
// median of the paired ratios (through the servers / in process; the dense
// clock's time / the sparse clock's) and their ranges, bytes per clock
// each way, and the rows made. Prints one JSON object.
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
#include "common/logging.h"
#include "common/params.h"
#include "common/partition.h"
#include "common/status_macros.h"
#include "proto/member.pb.h"
#include "proto/status.pb.h"
#include "server/sparse_table.h"
#include "server/sparse_tables.h"
#include "tests/cluster.h"
#include "tests/wait.h"
#include "worker/ps_client.h"
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

// The job: the table "emb", and a dense layer holding as many floats as
// the pool's rows (`pool` units of `width` inputs): the table as a dense
// parameter. This process is the worker; nothing trains.
std::string JobText(int width, int pool) {
  return absl::StrCat(R"pb(
    model {
      layers { type: DENSE units: )pb",
                      pool, R"pb( }
      layers { type: SOFTMAX_XENT }
    }
    consistency: ASP
    clocks: 100000000
    seed: 5
    tables { name: "emb" optimizer { type: ADAGRAD learning_rate: 0.1 } width: )pb",
                      width, " }\n", "data { dataset: SYNTHETIC synthetic_dim: ", width,
                      " synthetic_classes: ", pool, " }\n");
}

struct Measured {
  int servers = 0;
  std::vector<double> served_rows_per_s, local_rows_per_s, ratio;
  std::vector<double> dense_vs_sparse;  // a dense clock's time / a sparse clock's
  int64_t dense_bytes = 0;              // of the dense parameter, each way
  int64_t rows_held = 0;  // every row made on the servers by the end
};

// Seconds to pull `ids` and push gradients for them through `pull`, `push`.
template <typename Pull, typename Push>
double Batch(const std::vector<uint64_t>& ids, const std::vector<float>& grads, Pull pull,
             Push push) {
  std::vector<float> rows;
  const Clock::time_point t0 = Clock::now();
  absl::Status st = pull(ids, &rows);
  if (st.ok()) st = push(ids, grads);
  if (!st.ok()) {
    std::fprintf(stderr, "sparse_bench: a batch failed: %s\n", std::string(st.message()).c_str());
    std::exit(1);
  }
  return Since(t0);
}

// Every server's part of the table "emb" in this process, each id to its
// own server's: what the served table is measured against.
class InProcessTables {
 public:
  InProcessTables(const JobSpec& job, int servers, int width)
      : servers_(servers), width_(width) {
    for (int s = 0; s < servers; ++s) parts_.push_back(std::make_unique<SparseTables>(job, s, servers));
  }

  absl::Status Pull(const std::vector<uint64_t>& ids, std::vector<float>* rows) {
    std::vector<std::vector<uint64_t>> mine(servers_);
    for (uint64_t id : ids) mine[ServerOfRow(id, servers_)].push_back(id);
    std::vector<float> part;
    rows->clear();
    for (int s = 0; s < servers_; ++s) {
      RETURN_IF_ERROR(parts_[s]->Pull(0, 0, "emb", s, mine[s], &part));
      rows->insert(rows->end(), part.begin(), part.end());
    }
    return absl::OkStatus();
  }

  // One iteration's push (a clock of its own).
  absl::Status Push(const std::vector<uint64_t>& ids, const std::vector<float>& grads) {
    std::vector<std::vector<uint64_t>> mine(servers_);
    std::vector<std::vector<float>> part(servers_);
    for (size_t i = 0; i < ids.size(); ++i) {
      const int s = ServerOfRow(ids[i], servers_);
      mine[s].push_back(ids[i]);
      part[s].insert(part[s].end(), grads.begin() + i * width_, grads.begin() + (i + 1) * width_);
    }
    for (int s = 0; s < servers_; ++s) {
      RETURN_IF_ERROR(parts_[s]->Push(0, 0, "emb", s, clock_, 1, mine[s], part[s]));
    }
    ++clock_;
    return absl::OkStatus();
  }

  int64_t RowsHeld() const {
    int64_t rows = 0;
    for (const auto& part : parts_) {
      for (const TableStatus& t : part->Status()) rows += t.rows();
    }
    return rows;
  }

 private:
  const int servers_, width_;
  std::vector<std::unique_ptr<SparseTables>> parts_;
  int64_t clock_ = 0;
};

absl::StatusOr<Measured> Measure(int servers) {
  const int width = absl::GetFlag(FLAGS_width), n = absl::GetFlag(FLAGS_ids);
  Cluster cluster(absl::StrCat("sparse_bench_", servers));
  ClusterOptions o;
  const int pool_rows = 8 * n;
  o.job_text = JobText(width, pool_rows);
  o.servers = servers;
  o.workers = 0;  // this process is the worker
  o.scheduler_flags = {"--num_workers=1"};
  if (absl::Status st = cluster.Start(o); !st.ok()) return st;
  ASSIGN_OR_RETURN(testing::InProcessWorker worker,
                   testing::JoinAsWorker(cluster.scheduler_address()));
  std::vector<std::string> addresses;
  for (const Member& s : worker.cluster.servers()) addresses.push_back(s.address());
  JobSpec* job = &worker.job;
  // The dense side: the table's pool of rows as one parameter, over gRPC
  // (as the rows go).
  const std::vector<ParamInfo> params = ModelParams(job->model());
  ASSIGN_OR_RETURN(const Partition partition,
                   Partition::Make(params, job->chunk_bytes(), servers));
  std::vector<std::vector<float>> dense_grads, dense_weights;
  for (const ParamInfo& p : params) {
    dense_grads.emplace_back(p.numel, 1e-3f);
    dense_weights.emplace_back(p.numel, 0.0f);
  }
  PsClientOptions popts;
  popts.shm = false;
  PsClient dense(worker.cluster, &partition, worker.id, popts);
  int64_t dense_clock = 0;
  // Once the servers answer a pull of chunks they serve the tables too.
  RETURN_IF_ERROR(dense.Pull(0, 0, &dense_weights));
  auto dense_clock_s = [&]() -> double {
    const Clock::time_point t0 = Clock::now();
    if (!dense.Push(dense_clock++, 1, dense_grads).ok() ||
        !dense.Pull(dense_clock, 0, &dense_weights).ok()) {
      std::fprintf(stderr, "sparse_bench: a dense clock failed\n");
      std::exit(1);
    }
    return Since(t0);
  };
  RowClient client(*job, [addresses] { return addresses; }, worker.id);
  InProcessTables local(*job, servers, width);
  RowCall served;  // the served side's iterations (one push each)
  auto served_pull = [&](const std::vector<uint64_t>& ids, std::vector<float>* rows) {
    return client.Pull("emb", served, ids, rows);
  };
  auto served_push = [&](const std::vector<uint64_t>& ids, const std::vector<float>& grads) {
    const absl::Status st = client.Push("emb", served, 1, ids, grads);
    ++served.clock;
    return st;
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
    const double in_process = Batch(
        ids, grads, [&](const auto& i, auto* rows) { return local.Pull(i, rows); },
        [&](const auto& i, const auto& g) { return local.Push(i, g); });
    const double dense_s = dense_clock_s();
    if (r < 0) continue;
    m.served_rows_per_s.push_back(2.0 * n / served);
    m.local_rows_per_s.push_back(2.0 * n / in_process);
    m.ratio.push_back(in_process / served);
    m.dense_vs_sparse.push_back(dense_s / served);
  }
  for (const ParamInfo& p : params) m.dense_bytes += p.numel * 4;
  worker.Finish();
  (void)cluster.WaitAll(absl::Seconds(20));
  m.rows_held = local.RowsHeld();
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
        "\"dense_clock_vs_sparse\": %.3f, \"dense_clock_vs_sparse_range\": [%.3f, %.3f], "
        "\"sparse_bytes_per_clock\": %lld, \"dense_bytes_per_clock\": %lld, "
        "\"rows_made\": %lld}%s\n",
        m.servers, Median(m.served_rows_per_s), Median(m.local_rows_per_s), Median(m.ratio),
        *std::min_element(m.ratio.begin(), m.ratio.end()),
        *std::max_element(m.ratio.begin(), m.ratio.end()), Median(m.dense_vs_sparse),
        *std::min_element(m.dense_vs_sparse.begin(), m.dense_vs_sparse.end()),
        *std::max_element(m.dense_vs_sparse.begin(), m.dense_vs_sparse.end()),
        static_cast<long long>(2LL * n * width * 4), static_cast<long long>(2 * m.dense_bytes),
        static_cast<long long>(m.rows_held), k + 1 < all.size() ? "," : "");
  }
  std::printf(
      "  ],\n  \"note\": \"rows per second each way (a pull and a push of every id count 2); "
      "served: through the servers over gRPC on loopback (worker/row_client.h), in process: "
      "the same servers' SparseTables called directly; ratios are medians of paired rounds; "
      "the rows travel in slices of their own, never copied through protobuf strings "
      "(common/row_wire.h); dense: the pool's rows as one dense parameter pushed and pulled whole each clock over gRPC "
      "(shared memory off, as for rows); bytes per clock count both ways\"\n}\n");
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  pstrain::LogToStderr();
  absl::ParseCommandLine(argc, argv);
  return pstrain::Main();
}
