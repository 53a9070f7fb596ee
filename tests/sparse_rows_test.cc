// Sparse tables served by real daemons on loopback (JobSpec.tables,
// ParameterServer.PullRows/PushRows): a job with a table, 2 servers and a
// training worker; the test pulls and pushes rows by id through
// worker/row_client.h while the job runs. The rows come back bit for bit as
// one in-process SparseTable makes and updates them, each server holds
// only its ids, and every bad request is refused with its status, counted
// in the server's Status, with nothing made or applied.
#include <csignal>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <cstdio>
#include <cstring>
#include <thread>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/job_sizes.h"
#include "common/job_spec.h"
#include "common/refused.h"
#include "common/rpc.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "common/checkpoint_names.h"
#include "scheduler/manifest.h"
#include "server/sparse_table.h"
#include "server/table_checkpoint.h"
#include "tools/export.h"
#include "server/sparse_tables.h"
#include "tests/cluster.h"
#include "tests/test_jobs.h"
#include "tests/wait.h"
#include "worker/row_client.h"

namespace pstrain {
namespace testing {
namespace {

constexpr char kTable[] = R"pb(
  tables {
    name: "words"
    width: 8
    num_ids: 100000
    optimizer { type: ADAM learning_rate: 0.05 }
  }
)pb";

// The job as the daemons run it (defaults applied).
JobSpec TheJob(const std::string& text) {
  absl::StatusOr<JobSpec> job = ParseJobSpecText(text, "job");
  EXPECT_TRUE(job.ok()) << job.status();
  ApplyJobDefaults(&*job);
  EXPECT_TRUE(ValidateJobSpec(*job).ok());
  return *job;
}

// A row client of the servers at `servers` for worker `worker`: a pull
// waits up to 2 minutes for its read guarantee; a server that cannot be
// reached is retried for 30 s.
RowClient Client(const JobSpec& job, std::vector<std::string> servers, int worker) {
  RowClientOptions options;
  options.call_timeout = absl::Minutes(2);
  options.retry_window = absl::Seconds(30);
  return RowClient(job, [servers] { return servers; }, worker, options);
}

// A row call of iteration `clock` in generation `generation`.
RowCall At(int64_t clock, int64_t generation = 0) {
  RowCall call;
  call.clock = clock;
  call.generation = generation;
  return call;
}

class SparseRowsTest : public ::testing::Test {
 protected:
  // The job with `workers` training workers (their dense MLP; the test
  // pulls and pushes the table as those workers).
  void StartJob(int workers, const char* tables = kTable) {
    job_text_ = SixteenClassJob(absl::StrCat("clocks: 100000\nseed: 11\n", tables));
    ClusterOptions options;
    options.job_text = job_text_;
    options.servers = 2;
    options.workers = workers;
    options.worker_flags.assign(workers, {"--straggler=fixed:5"});
    ASSERT_TRUE(cluster_.Start(options).ok()) << cluster_.Logs();
    // Once the worker trains, both servers serve the job (and its tables).
    ASSERT_TRUE(WaitForStatus(
        cluster_.scheduler_address(),
        [](const ClusterStatus& st) { return SlowestClock(st) >= 2; }, absl::Seconds(60)))
        << cluster_.Logs();
    absl::StatusOr<ClusterStatus> st = SchedulerStatus(cluster_.scheduler_address());
    ASSERT_TRUE(st.ok());
    for (int id = 0; id < 2; ++id) servers_.push_back(MemberOf(*st, SERVER, id).address());
  }

  // The job of kTable checkpointing every 2 clocks into a fresh directory
  // under TEST_TMPDIR (checkpoint_dir_).
  void StartCheckpointingJob() {
    const char* tmp = std::getenv("TEST_TMPDIR");
    checkpoint_dir_ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/sparse_checkpoints");
    std::filesystem::remove_all(checkpoint_dir_);
    StartJob(1, absl::StrCat("checkpoint_every: 2\ncheckpoint_dir: \"", checkpoint_dir_, "\"\n",
                             kTable)
                    .c_str());
  }

  // The table trained for 4 clocks as worker 0 (300 ids a clock,
  // overlapping) and beside it `reference`, until the scheduler's manifest
  // names clock 4 (the table's clock: the manifest can go no further).
  void TrainAndCheckpoint(SparseTable* reference, std::vector<uint64_t>* touched) {
    RowClient client = Client(TheJob(job_text_), servers_, 0);
    for (int c = 0; c < 4; ++c) {
      std::vector<uint64_t> ids;
      for (uint64_t i = 0; i < 300; ++i) ids.push_back((c * 200 + i * 13) % 100000);
      touched->insert(touched->end(), ids.begin(), ids.end());
      std::vector<float> rows, scratch(ids.size() * 8);
      ASSERT_TRUE(client.Pull("words", At(c), ids, &rows).ok()) << cluster_.Logs();
      std::vector<float> grads(ids.size() * 8);
      for (size_t i = 0; i < grads.size(); ++i) grads[i] = std::sin(0.3f * c + 0.01f * i);
      ASSERT_TRUE(client.Push("words", At(c), 1, ids, grads).ok());
      ASSERT_TRUE(reference->Pull(ids, scratch.data()).ok());
      ASSERT_TRUE(reference->Push(ids, grads).ok());
    }
    absl::StatusOr<std::optional<Manifest>> manifest;
    for (const absl::Time end = absl::Now() + absl::Seconds(60); absl::Now() < end;
         absl::SleepFor(absl::Milliseconds(100))) {
      manifest = ReadManifest(checkpoint_dir_);
      if (manifest.ok() && manifest->has_value() && (*manifest)->clock >= 4) break;
    }
    ASSERT_TRUE(manifest.ok() && manifest->has_value()) << cluster_.Logs();
    ASSERT_EQ((*manifest)->clock, 4) << "the table reached clock 4, not beyond";
  }

  static TableConfig ReferenceConfig(const JobSpec& job) {
    return TableConfig{"words", 8, job.tables(0).init_scale(), job.seed(),
                       RowOptimizerOf(job.tables(0).optimizer())};
  }

  Cluster cluster_{"sparse_rows"};
  std::string checkpoint_dir_;
  std::string job_text_;
  std::vector<std::string> servers_;  // by id
};

TEST_F(SparseRowsTest, RowsComeBackAsOneTableMakesAndUpdatesThem) {
  ASSERT_NO_FATAL_FAILURE(StartJob(1));
  const JobSpec job = TheJob(job_text_);
  RowClient client = Client(job, servers_, /*worker_id=*/0);
  SparseTable reference(TableConfig{"words", 8, job.tables(0).init_scale(), job.seed(),
                                    RowOptimizerOf(job.tables(0).optimizer())});
  // A batch's ids: repeats, neighbours and far ids.
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < 300; ++i) ids.push_back((i * i * 7919) % 100000);
  ids.push_back(ids[3]);
  std::vector<float> rows, expected(ids.size() * 8);
  const absl::Status pulled = client.Pull("words", At(0), ids, &rows);
  ASSERT_TRUE(pulled.ok()) << pulled << cluster_.Logs();
  ASSERT_TRUE(reference.Pull(ids, expected.data()).ok());
  ASSERT_EQ(rows.size(), expected.size());
  EXPECT_EQ(std::memcmp(rows.data(), expected.data(), rows.size() * 4), 0);

  // Three updates with repeated ids (each row's gradients summed, then
  // applied), and a fourth of server 0's rows only: Adam's step counts the
  // table's updates, so server 1 must count it too.
  std::vector<uint64_t> server0_ids;
  for (uint64_t id : ids) {
    if (ServerOfRow(id, 2) == 0 && server0_ids.size() < 20) server0_ids.push_back(id);
  }
  for (int clock = 0; clock < 4; ++clock) {
    std::vector<uint64_t> batch =
        clock == 3 ? server0_ids
                   : std::vector<uint64_t>(ids.begin() + clock * 50, ids.begin() + clock * 50 + 80);
    batch.push_back(batch[0]);
    std::vector<float> grads(batch.size() * 8);
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = std::sin(clock * 3.0f + i);
    const absl::Status sent = client.Push("words", At(clock), 1, batch, grads);
    ASSERT_TRUE(sent.ok()) << sent;
    std::vector<uint64_t> distinct;
    std::vector<float> summed;
    CoalesceRows(batch, grads, 8, &distinct, &summed);
    const absl::Status pushed = reference.Push(distinct, summed);
    ASSERT_TRUE(pushed.ok()) << pushed;
  }
  ASSERT_TRUE(client.Pull("words", At(4), ids, &rows).ok());
  ASSERT_TRUE(reference.Pull(ids, expected.data()).ok());
  EXPECT_EQ(std::memcmp(rows.data(), expected.data(), rows.size() * 4), 0);

  // Each server holds only its ids; together, every distinct id once.
  int64_t held = 0;
  for (int s = 0; s < 2; ++s) {
    const MemberStatus st = ServerStatus(servers_[s]);
    ASSERT_EQ(st.tables_size(), 1);
    EXPECT_EQ(st.tables(0).name(), "words");
    EXPECT_GT(st.tables(0).rows(), 0);
    EXPECT_EQ(st.tables(0).updates(), 4);  // each push reached both servers
    EXPECT_EQ(st.tables(0).refused(), 0);
    held += st.tables(0).rows();
  }
  EXPECT_EQ(held, reference.num_rows());
  // The scheduler's Status (psctl status) carries each server's tables too.
  EXPECT_TRUE(WaitForStatus(
      cluster_.scheduler_address(),
      [](const ClusterStatus& st) {
        for (int id = 0; id < 2; ++id) {
          const MemberStatus m = MemberOf(st, SERVER, id);
          if (m.tables_size() != 1 || m.tables(0).updates() != 4) return false;
        }
        return true;
      },
      absl::Seconds(30)));
}

TEST_F(SparseRowsTest, BadRowRequestsAreRefusedCountedAndChangeNothing) {
  ASSERT_NO_FATAL_FAILURE(StartJob(1));
  const JobSpec job = TheJob(job_text_);
  RowClient client = Client(job, servers_, 0);
  // Two ids of server 0 (pulled), one not pulled, one of server 1.
  std::vector<uint64_t> mine, theirs;
  for (uint64_t id = 0; mine.size() < 3 || theirs.empty(); ++id) {
    (ServerOfRow(id, 2) == 0 ? mine : theirs).push_back(id);
  }
  std::vector<float> before;
  ASSERT_TRUE(client.Pull("words", At(0), {mine[0], mine[1]}, &before).ok()) << cluster_.Logs();
  auto stub = ParameterServer::NewStub(MakeChannel(servers_[0]));
  auto pull = [&](const std::string& table, std::vector<uint64_t> ids) {
    PullRowsRequest req;
    req.set_table(table);
    for (uint64_t id : ids) req.add_ids(id);
    PullRowsResponse reply;
    return stub->PullRows(ContextWithTimeout(absl::Seconds(10)).get(), req, &reply).error_code();
  };
  auto push = [&](const std::string& table, std::vector<uint64_t> ids, size_t floats) {
    PushRowsRequest req;
    req.set_table(table);
    for (uint64_t id : ids) req.add_ids(id);
    req.set_grads(std::string(floats * 4, '\0'));
    PushRowsResponse reply;
    return stub->PushRows(ContextWithTimeout(absl::Seconds(10)).get(), req, &reply).error_code();
  };
  uint64_t beyond = 100000;
  while (ServerOfRow(beyond, 2) != 0) ++beyond;
  EXPECT_EQ(pull("nouns", {mine[0]}), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(pull("words", {mine[2], beyond}), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_EQ(pull("words", {mine[2], theirs[0]}), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(push("nouns", {mine[0]}, 8), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(push("words", {mine[0]}, 7), grpc::StatusCode::INVALID_ARGUMENT);  // wrong width
  EXPECT_EQ(push("words", {mine[0], mine[2]}, 16), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(push("words", {beyond}, 8), grpc::StatusCode::OUT_OF_RANGE);
  // A worker the job does not have (its only one is 0).
  PullRowsRequest stranger;
  stranger.set_worker_id(5);
  stranger.set_table("words");
  stranger.add_ids(mine[0]);
  PullRowsResponse rows;
  EXPECT_EQ(stub->PullRows(ContextWithTimeout(absl::Seconds(10)).get(), stranger, &rows)
                .error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  const MemberStatus st = ServerStatus(servers_[0]);
  ASSERT_EQ(st.tables_size(), 1);
  EXPECT_EQ(st.tables(0).rows(), 2);  // no refused pull made a row
  EXPECT_EQ(st.tables(0).updates(), 0);
  EXPECT_EQ(st.tables(0).refused(), 5);
  EXPECT_EQ(Refused(st, kRefusedRows), 8);  // those naming "nouns" or worker 5 too
  EXPECT_EQ(Refused(st, kRefusedChunks), 0);  // each counted once, as rows
  std::vector<float> after;
  ASSERT_TRUE(client.Pull("words", At(0), {mine[0], mine[1]}, &after).ok());
  EXPECT_EQ(after, before);
  // The client refuses a table the job does not declare before any call.
  EXPECT_EQ(client.Pull("nouns", At(0), {mine[0]}, &after).code(), absl::StatusCode::kNotFound);
}

// Worker w's batch at clock c: ids drawn from a pool both workers share
// (their rows overlap), one repeated; and its gradients.
std::vector<uint64_t> Batch(int w, int c) {
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < 60; ++i) ids.push_back(((c * 37 + w * 101 + i * 13) % 200) * 7919 % 100000);
  ids.push_back(ids[0]);
  return ids;
}
std::vector<float> Grads(int w, int c, size_t rows) {
  std::vector<float> g(rows * 8);
  for (size_t i = 0; i < g.size(); ++i) g[i] = std::sin(c * 3.0f + w * 7.0f + 0.1f * i);
  return g;
}
constexpr int kSamples[2] = {3, 5};

// One in-process table updated by BSP round c: each row by the mean over
// both workers' samples of its gradients.
void ReferenceRound(SparseTable& reference, int c) {
  absl::flat_hash_map<uint64_t, size_t> index;
  std::vector<uint64_t> ids;
  std::vector<float> sum;
  for (int w = 0; w < 2; ++w) {
    const std::vector<uint64_t> batch = Batch(w, c);
    std::vector<uint64_t> distinct;
    std::vector<float> summed;
    CoalesceRows(batch, Grads(w, c, batch.size()), 8, &distinct, &summed);
    for (size_t k = 0; k < distinct.size(); ++k) {
      auto [it, fresh] = index.try_emplace(distinct[k], ids.size());
      if (fresh) {
        ids.push_back(distinct[k]);
        sum.insert(sum.end(), 8, 0.0f);
      }
      for (int j = 0; j < 8; ++j) {
        sum[it->second * 8 + j] += static_cast<float>(kSamples[w]) * summed[k * 8 + j];
      }
    }
  }
  for (float& v : sum) v /= static_cast<float>(kSamples[0] + kSamples[1]);
  std::vector<float> scratch(ids.size() * 8);
  ASSERT_TRUE(reference.Pull(ids, scratch.data()).ok());
  ASSERT_TRUE(reference.Push(ids, sum).ok());
}

// BSP tables with two workers: each clock's pull waits until both workers'
// pushes of the clock before are applied as one update (the mean over
// their samples), so what each worker reads at clock c is bit for bit one
// table after c such updates -- while the workers run at their own pace.
TEST_F(SparseRowsTest, TwoWorkersPullWhatOneTableHoldsAfterEachBspRound) {
  ASSERT_NO_FATAL_FAILURE(StartJob(2));
  const JobSpec job = TheJob(job_text_);
  ASSERT_EQ(TableConsistency(job), BSP);
  constexpr int kClocks = 5;
  // What worker w read at clock c, and how its calls ended.
  std::vector<std::vector<float>> read[2];
  absl::Status ended[2];
  auto work = [&](int w) {
    RowClient client = Client(job, servers_, w);
    for (int c = 0; c < kClocks; ++c) {
      const std::vector<uint64_t> batch = Batch(w, c);
      std::vector<float> rows;
      absl::Status st = client.Pull("words", At(c), batch, &rows);
      if (st.ok()) {
        read[w].push_back(rows);
        if (w == 1) absl::SleepFor(absl::Milliseconds(50));  // the slower worker
        st = client.Push("words", At(c), kSamples[w], batch, Grads(w, c, batch.size()));
      }
      if (!st.ok()) {
        ended[w] = st;
        return;
      }
    }
  };
  std::thread w0(work, 0), w1(work, 1);
  w0.join();
  w1.join();
  ASSERT_TRUE(ended[0].ok()) << ended[0] << cluster_.Logs();
  ASSERT_TRUE(ended[1].ok()) << ended[1];

  SparseTable reference(TableConfig{"words", 8, job.tables(0).init_scale(), job.seed(),
                                    RowOptimizerOf(job.tables(0).optimizer())});
  for (int c = 0; c < kClocks; ++c) {
    for (int w = 0; w < 2; ++w) {
      const std::vector<uint64_t> batch = Batch(w, c);
      std::vector<float> expected(batch.size() * 8);
      ASSERT_TRUE(reference.Pull(batch, expected.data()).ok());
      ASSERT_EQ(read[w][c].size(), expected.size());
      EXPECT_EQ(std::memcmp(read[w][c].data(), expected.data(), expected.size() * 4), 0)
          << "worker " << w << " at clock " << c;
    }
    ASSERT_NO_FATAL_FAILURE(ReferenceRound(reference, c));
  }

  // A pull waits, parked and shown in Status, for the worker behind.
  RowClient ahead = Client(job, servers_, 0), behind = Client(job, servers_, 1);
  const std::vector<uint64_t> batch = Batch(0, kClocks);
  ASSERT_TRUE(ahead.Push("words", At(kClocks), kSamples[0], batch, Grads(0, kClocks, batch.size()))
                  .ok());
  std::vector<float> rows;
  absl::Status pulled;
  std::thread waiting([&] { pulled = ahead.Pull("words", At(kClocks + 1), batch, &rows); });
  EXPECT_TRUE(WaitForStatus(
      cluster_.scheduler_address(),
      [](const ClusterStatus& st) {
        for (int id = 0; id < 2; ++id) {
          const MemberStatus m = MemberOf(st, SERVER, id);
          if (m.tables_size() != 1 || m.tables(0).pulls_waiting() != 1) return false;
        }
        return true;
      },
      absl::Seconds(30)));
  for (int s = 0; s < 2; ++s) {
    const MemberStatus st = ServerStatus(servers_[s]);
    ASSERT_EQ(st.tables_size(), 1);
    EXPECT_EQ(st.tables(0).clock(), kClocks);
    EXPECT_EQ(st.tables(0).updates(), kClocks);
    EXPECT_EQ(st.tables(0).consistency(), BSP);
  }
  const std::vector<uint64_t> other = Batch(1, kClocks);
  ASSERT_TRUE(behind.Pull("words", At(kClocks), other, &rows).ok());
  ASSERT_TRUE(
      behind.Push("words", At(kClocks), kSamples[1], other, Grads(1, kClocks, other.size())).ok());
  waiting.join();
  ASSERT_TRUE(pulled.ok()) << pulled;
  ASSERT_NO_FATAL_FAILURE(ReferenceRound(reference, kClocks));
  std::vector<float> expected(batch.size() * 8);
  ASSERT_TRUE(reference.Pull(batch, expected.data()).ok());
  EXPECT_EQ(std::memcmp(rows.data(), expected.data(), expected.size() * 4), 0);
  for (int s = 0; s < 2; ++s) EXPECT_EQ(ServerStatus(servers_[s]).tables(0).clock(), kClocks + 1);
}

// A table with a memory budget of 8 MiB a server (width 64, Adam: 768
// bytes a row and 48 of bookkeeping, 10,280 rows) while the ids touched
// grow past 4x it: each
// server keeps at most the budget in memory (Status; its resident memory
// within the budget and 64 MiB of its start), the rest in its spill file,
// and the rows that went there come back bit for bit as one table without
// a bound makes and updates them.
TEST_F(SparseRowsTest, MemoryFollowsTheBudgetNotTheIdsTouched) {
  constexpr int64_t kBudget = int64_t{8} << 20;
  const std::string table = absl::StrCat(R"pb(
    tables {
      name: "words"
      width: 64
      optimizer { type: ADAM learning_rate: 0.05 }
      memory_budget_bytes: )pb", kBudget, "\n}\n");
  ASSERT_NO_FATAL_FAILURE(StartJob(1, table.c_str()));
  const JobSpec job = TheJob(job_text_);
  int64_t rss_before[2];
  for (int s = 0; s < 2; ++s) rss_before[s] = ServerStatus(servers_[s]).rss_bytes();
  RowClient client = Client(job, servers_, 0);
  TableConfig config{"words", 64, job.tables(0).init_scale(), job.seed(),
                     RowOptimizerOf(job.tables(0).optimizer())};
  SparseTable reference(config);
  // 24 batches of 4096 new ids (98,304 rows, 75 MB with Adam's state: 4.5x
  // the two servers' budgets), each pulled and updated.
  std::vector<uint64_t> first;
  for (int c = 0; c < 24; ++c) {
    std::vector<uint64_t> ids(4096);
    for (int i = 0; i < 4096; ++i) ids[i] = (static_cast<uint64_t>(c) << 32) + i * 7919;
    if (c == 0) first = ids;
    std::vector<float> rows;
    ASSERT_TRUE(client.Pull("words", At(c), ids, &rows).ok()) << cluster_.Logs();
    std::vector<float> grads(ids.size() * 64);
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = std::sin(c + 0.01f * i);
    ASSERT_TRUE(client.Push("words", At(c), 1, ids, grads).ok());
    std::vector<float> scratch(rows.size());
    ASSERT_TRUE(reference.Pull(ids, scratch.data()).ok());
    ASSERT_TRUE(reference.Push(ids, grads).ok());
  }
  int64_t on_disk = 0;
  for (int s = 0; s < 2; ++s) {
    const MemberStatus st = ServerStatus(servers_[s]);
    ASSERT_EQ(st.tables_size(), 1);
    const TableStatus& t = st.tables(0);
    EXPECT_LE(t.resident_bytes(), kBudget) << "server " << s;
    EXPECT_EQ(t.rows(), t.rows_resident() + t.rows_on_disk());
    EXPECT_GT(t.rows_on_disk(), 0);
    EXPECT_LE(st.rss_bytes(), rss_before[s] + kBudget + (int64_t{64} << 20))
        << "server " << s << " started at " << rss_before[s];
    on_disk += t.rows_on_disk();
    std::fprintf(stderr, "server %d: %lld rows in memory (%lld bytes), %lld on disk; rss %lld -> %lld\n",
                 s, static_cast<long long>(t.rows_resident()),
                 static_cast<long long>(t.resident_bytes()), static_cast<long long>(t.rows_on_disk()),
                 static_cast<long long>(rss_before[s]), static_cast<long long>(st.rss_bytes()));
  }
  // Each server holds its budget's rows: 768 bytes and their bookkeeping each.
  const int64_t per_server = kBudget / (768 + kRowBookkeepingBytes);
  EXPECT_EQ(on_disk, 98304 - 2 * per_server);
  // The first batch's rows went to disk long ago: bit for bit.
  std::vector<float> rows, expected(first.size() * 64);
  ASSERT_TRUE(client.Pull("words", At(24), first, &rows).ok());
  ASSERT_TRUE(reference.Pull(first, expected.data()).ok());
  EXPECT_EQ(std::memcmp(rows.data(), expected.data(), rows.size() * 4), 0);
}

// Admission after 2 sightings and expiry after 3 clocks, through the real
// servers under BSP: every pull reads bit for bit what one in-process
// table with the same rules holds, and the servers' Status counts the rows
// made, expired and the gradient rows dropped.
TEST_F(SparseRowsTest, AdmissionAndExpiryAsOneTableAppliesThem) {
  ASSERT_NO_FATAL_FAILURE(StartJob(1, R"pb(
    tables {
      name: "words"
      width: 8
      optimizer { type: ADAM learning_rate: 0.05 }
      admit_after: 2
      expire_after_clocks: 3
    }
  )pb"));
  const JobSpec job = TheJob(job_text_);
  RowClient client = Client(job, servers_, 0);
  TableConfig config{"words", 8, job.tables(0).init_scale(), job.seed(),
                     RowOptimizerOf(job.tables(0).optimizer())};
  config.admit_after = 2;
  config.expire_after = 3;
  SparseTable reference(config);
  const uint64_t a = 17, b = 1234567, c = 99;
  // Clock 0: a and b seen once (dropped); 1: a admitted; 2: a updated;
  // 3-7: only c (admitted at 4) while a expires; 8: a pulls as zeros.
  const std::vector<std::vector<uint64_t>> batches = {{a, b}, {a}, {a}, {c}, {c}, {c},
                                                      {c},    {c}, {a, c}};
  for (int clock = 0; clock < static_cast<int>(batches.size()); ++clock) {
    const std::vector<uint64_t>& ids = batches[clock];
    std::vector<float> rows, expected(ids.size() * 8);
    ASSERT_TRUE(client.Pull("words", At(clock), ids, &rows).ok()) << cluster_.Logs();
    ASSERT_TRUE(reference.Pull(ids, expected.data()).ok());
    ASSERT_EQ(rows.size(), expected.size());
    EXPECT_EQ(std::memcmp(rows.data(), expected.data(), rows.size() * 4), 0) << "clock " << clock;
    if (clock == 2) {
      EXPECT_NE(rows[0], 0.0f) << "a has its row";
    }
    if (clock == 8) {
      EXPECT_EQ(rows[0], 0.0f) << "a expired: not admitted again until an update";
    }
    std::vector<float> grads(ids.size() * 8);
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = std::cos(clock + 0.1f * i);
    ASSERT_TRUE(client.Push("words", At(clock), 1, ids, grads).ok());
    ASSERT_TRUE(reference.Push(ids, grads).ok());
    reference.Advance(clock + 1);
  }
  int64_t rows = 0, created = 0, expired = 0, dropped = 0;
  for (int s = 0; s < 2; ++s) {
    const TableStatus t = ServerStatus(servers_[s]).tables(0);
    rows += t.rows();
    created += t.rows_created();
    expired += t.rows_expired();
    dropped += t.rows_dropped();
  }
  EXPECT_EQ(rows, 2);     // c, and a again (admitted at once: seen before)
  EXPECT_EQ(created, 3);  // a, c, a
  EXPECT_EQ(expired, 1);  // a
  EXPECT_EQ(dropped, 3);  // a and b at clock 0, c at 3
  EXPECT_EQ(reference.rows().created, created);
  EXPECT_EQ(reference.rows().dropped, dropped);
}

// Checkpoints of a table through the real daemons: every 2 clocks, each
// server writes its part; once both servers' parts and the chunks' files of
// clock 4 are in, the scheduler's manifest names clock 4; each server's
// file holds bit for bit the rows one in-process table holds after those
// 4 updates, and
// `psctl export`'s code writes every row of the table as "words.ids" and
// "words.weight".
TEST_F(SparseRowsTest, CheckpointsHoldEveryRowAndExportWritesThem) {
  ASSERT_NO_FATAL_FAILURE(StartCheckpointingJob());
  const JobSpec job = TheJob(job_text_);
  const TableConfig config = ReferenceConfig(job);
  SparseTable reference(config);
  std::vector<uint64_t> touched;
  ASSERT_NO_FATAL_FAILURE(TrainAndCheckpoint(&reference, &touched));
  const std::string& dir = checkpoint_dir_;
  int64_t rows = 0;
  for (int s = 0; s < 2; ++s) {
    SparseTable part(config);
    ASSERT_TRUE(ReadTableCheckpoint(TableCheckpointPath(dir, s, 4, "words"), s, 4, &part).ok());
    EXPECT_EQ(part.updates(), 4);
    rows += part.num_rows();
    for (uint64_t id : touched) {
      if (ServerOfRow(id, 2) != s) continue;
      std::vector<float> want(8);
      ASSERT_TRUE(reference.Pull({id}, want.data()).ok());
      ASSERT_NE(part.Row(id), nullptr) << id;
      EXPECT_EQ(std::memcmp(part.Row(id), want.data(), 32), 0) << "row " << id;
    }
  }
  EXPECT_EQ(rows, reference.num_rows());
  const std::string out = dir + "/export.safetensors";
  absl::StatusOr<JobSpec> ran = LoadJobSpec(CheckpointJobPath(dir));  // as psctl export
  ASSERT_TRUE(ran.ok()) << ran.status();
  ApplyJobDefaults(&*ran);
  const absl::StatusOr<int64_t> exported = ExportCheckpoint(dir, *ran, out);
  ASSERT_TRUE(exported.ok()) << exported.status();
  EXPECT_EQ(*exported, 4);
  std::ifstream in(out, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(file.find(absl::StrCat("\"words.ids\":{\"dtype\":\"I64\",\"shape\":[", rows, "]")),
            std::string::npos);
  EXPECT_NE(file.find(absl::StrCat("\"words.weight\":{\"dtype\":\"F32\",\"shape\":[", rows,
                                   ",8]")),
            std::string::npos);
}


// A server killed with SIGKILL once a checkpoint of the table is complete
// and replaced (--id=1): the cluster rolls back to that checkpoint, and
// every row comes back from the two servers bit for bit as one in-process
// table holds it after the checkpoint's 4 updates -- none lost, the
// replacement's rows read from its file, the survivor's restored too.
TEST_F(SparseRowsTest, AServerKilledLosesNoRowOfTheCompleteCheckpoint) {
  ASSERT_NO_FATAL_FAILURE(StartCheckpointingJob());
  const JobSpec job = TheJob(job_text_);
  SparseTable reference(ReferenceConfig(job));
  std::vector<uint64_t> touched;
  ASSERT_NO_FATAL_FAILURE(TrainAndCheckpoint(&reference, &touched));
  const int victim = cluster_.ServerProcess(1);
  ASSERT_GE(victim, 0) << cluster_.Logs();
  cluster_.servers()[victim].Kill(SIGKILL);
  ASSERT_TRUE(cluster_.AddServer({"--id=1"}).ok());
  Rollback rollback;
  ASSERT_TRUE(WaitForStatus(
      cluster_.scheduler_address(),
      [&](const ClusterStatus& st) {
        if (st.rollbacks_size() > 0) rollback = st.rollbacks(0);
        return rollback.done_unix_ms() != 0;
      },
      absl::Seconds(60)))
      << cluster_.Logs();
  EXPECT_EQ(rollback.to_clock(), 4) << "the newest set with the table's files";
  absl::StatusOr<ClusterStatus> st = SchedulerStatus(cluster_.scheduler_address());
  ASSERT_TRUE(st.ok());
  const std::vector<std::string> now = {MemberOf(*st, SERVER, 0).address(),
                                        MemberOf(*st, SERVER, 1).address()};
  ASSERT_NE(now[1], servers_[1]) << "server 1 is the replacement";
  RowClient client = Client(job, now, 0);
  std::vector<float> rows, expected(touched.size() * 8);
  ASSERT_TRUE(client.Pull("words", At(4, st->generation()), touched, &rows).ok()) << cluster_.Logs();
  ASSERT_TRUE(reference.Pull(touched, expected.data()).ok());
  ASSERT_EQ(rows.size(), expected.size());
  EXPECT_EQ(std::memcmp(rows.data(), expected.data(), rows.size() * 4), 0);
  int64_t held = 0;
  for (int s = 0; s < 2; ++s) {
    const TableStatus t = ServerStatus(now[s]).tables(0);
    held += t.rows();
    EXPECT_EQ(t.updates(), 4) << "server " << s;
    EXPECT_EQ(t.clock(), 4) << "server " << s;
  }
  EXPECT_EQ(held, reference.num_rows());
}

}  // namespace
}  // namespace testing
}  // namespace pstrain
