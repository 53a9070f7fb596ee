// Sparse tables served by real daemons on loopback (JobSpec.tables,
// ParameterServer.PullRows/PushRows): a job with a table, 2 servers and a
// training worker; the test pulls and pushes rows by id through
// worker/row_client.h while the job runs. The rows come back bit for bit as
// one in-process SparseTable makes and updates them, each server holds
// only its ids, and every bad request is refused with its status, counted
// in the server's Status, with nothing made or applied.
// Memory, admission and expiry, checkpoints and a killed server:
// sparse_rows_state_test.cc.
#include "tests/sparse_rows_fixture.h"

namespace pstrain {
namespace testing {
namespace sparse_rows {
namespace {

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
    ASSERT_EQ(st.server().tables_size(), 1);
    EXPECT_EQ(st.server().tables(0).name(), "words");
    EXPECT_GT(st.server().tables(0).rows(), 0);
    EXPECT_EQ(st.server().tables(0).updates(), 4);  // each push reached both servers
    EXPECT_EQ(st.server().tables(0).refused(), 0);
    held += st.server().tables(0).rows();
  }
  EXPECT_EQ(held, reference.num_rows());
  // The scheduler's Status (psctl status) carries each server's tables too.
  EXPECT_TRUE(WaitForStatus(
      cluster_.scheduler_address(),
      [](const ClusterStatus& st) {
        for (int id = 0; id < 2; ++id) {
          const MemberStatus m = MemberOf(st, SERVER, id);
          if (m.server().tables_size() != 1 || m.server().tables(0).updates() != 4) return false;
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
  EXPECT_EQ(
      stub->PullRows(ContextWithTimeout(absl::Seconds(10)).get(), stranger, &rows).error_code(),
      grpc::StatusCode::INVALID_ARGUMENT);

  const MemberStatus st = ServerStatus(servers_[0]);
  ASSERT_EQ(st.server().tables_size(), 1);
  EXPECT_EQ(st.server().tables(0).rows(), 2);  // no refused pull made a row
  EXPECT_EQ(st.server().tables(0).updates(), 0);
  EXPECT_EQ(st.server().tables(0).refused(), 5);
  EXPECT_EQ(Refused(st, kRefusedRows), 8);    // those naming "nouns" or worker 5 too
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
  for (uint64_t i = 0; i < 60; ++i)
    ids.push_back(((c * 37 + w * 101 + i * 13) % 200) * 7919 % 100000);
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

// What worker w read at clock c (`read[w][c]`, clocks 0..clocks-1) is bit
// for bit `reference` after c rounds; `reference` ends after `clocks`.
void ExpectReadsOfOneTable(const std::vector<std::vector<float>> (&read)[2], int clocks,
                           SparseTable& reference) {
  for (int c = 0; c < clocks; ++c) {
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
  ASSERT_NO_FATAL_FAILURE(ExpectReadsOfOneTable(read, kClocks, reference));

  // A pull waits, parked and shown in Status, for the worker behind.
  RowClient ahead = Client(job, servers_, 0), behind = Client(job, servers_, 1);
  const std::vector<uint64_t> batch = Batch(0, kClocks);
  ASSERT_TRUE(
      ahead.Push("words", At(kClocks), kSamples[0], batch, Grads(0, kClocks, batch.size())).ok());
  std::vector<float> rows;
  absl::Status pulled;
  std::thread waiting([&] { pulled = ahead.Pull("words", At(kClocks + 1), batch, &rows); });
  EXPECT_TRUE(WaitForStatus(
      cluster_.scheduler_address(),
      [](const ClusterStatus& st) {
        for (int id = 0; id < 2; ++id) {
          const MemberStatus m = MemberOf(st, SERVER, id);
          if (m.server().tables_size() != 1 || m.server().tables(0).pulls_waiting() != 1)
            return false;
        }
        return true;
      },
      absl::Seconds(30)));
  for (int s = 0; s < 2; ++s) {
    const MemberStatus st = ServerStatus(servers_[s]);
    ASSERT_EQ(st.server().tables_size(), 1);
    EXPECT_EQ(st.server().tables(0).clock(), kClocks);
    EXPECT_EQ(st.server().tables(0).updates(), kClocks);
    EXPECT_EQ(st.server().tables(0).consistency(), BSP);
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
  for (int s = 0; s < 2; ++s)
    EXPECT_EQ(ServerStatus(servers_[s]).server().tables(0).clock(), kClocks + 1);
}

// A table with a memory budget of 8 MiB a server (width 64, Adam: 768
// bytes a row and 48 of bookkeeping, 10,280 rows) while the ids touched
// grow past 4x it: each
// server keeps at most the budget in memory (Status; its resident memory
// within the budget and 64 MiB of its start), the rest in its spill file,
// and the rows that went there come back bit for bit as one table without
// a bound makes and updates them.

}  // namespace
}  // namespace sparse_rows
}  // namespace testing
}  // namespace pstrain
