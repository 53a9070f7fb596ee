// Sparse tables served by real daemons on loopback, their state: memory
// that follows the budget, admission and expiry as one table applies them,
// checkpoints that hold every row (and export), and a server killed after a
// complete checkpoint losing no row. The fixture: sparse_rows_fixture.h.
#include "tests/sparse_rows_fixture.h"

namespace pstrain {
namespace testing {
namespace sparse_rows {
namespace {

TEST_F(SparseRowsTest, MemoryFollowsTheBudgetNotTheIdsTouched) {
  constexpr int64_t kBudget = int64_t{8} << 20;
  const std::string table = absl::StrCat(R"pb(
                                           tables { name: "words" width: 64
                                                    optimizer { type: ADAM learning_rate: 0.05 }
                                                    memory_budget_bytes:)pb",
                                         kBudget, "\n}\n");
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
    ASSERT_EQ(st.server().tables_size(), 1);
    const TableStatus& t = st.server().tables(0);
    EXPECT_LE(t.resident_bytes(), kBudget) << "server " << s;
    EXPECT_EQ(t.rows(), t.rows_resident() + t.rows_on_disk());
    EXPECT_GT(t.rows_on_disk(), 0);
    EXPECT_LE(st.rss_bytes(), rss_before[s] + kBudget + (int64_t{64} << 20))
        << "server " << s << " started at " << rss_before[s];
    on_disk += t.rows_on_disk();
    std::fprintf(
        stderr, "server %d: %lld rows in memory (%lld bytes), %lld on disk; rss %lld -> %lld\n", s,
        static_cast<long long>(t.rows_resident()), static_cast<long long>(t.resident_bytes()),
        static_cast<long long>(t.rows_on_disk()), static_cast<long long>(rss_before[s]),
        static_cast<long long>(st.rss_bytes()));
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
  const std::vector<std::vector<uint64_t>> batches = {{a, b}, {a}, {a}, {c},   {c},
                                                      {c},    {c}, {c}, {a, c}};
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
    const TableStatus t = ServerStatus(servers_[s]).server().tables(0);
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
  EXPECT_NE(file.find(absl::StrCat("\"words.weight\":{\"dtype\":\"F32\",\"shape\":[", rows, ",8]")),
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
  const absl::Time killed = absl::Now();
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
  // Server 1 is the replacement: started after the kill (it may listen on
  // the port the killed one had: the kernel hands ephemeral ports out again).
  ASSERT_LE(ServerStatus(now[1]).uptime_s(), absl::ToDoubleSeconds(absl::Now() - killed))
      << "server 1 is the replacement";
  RowClient client = Client(job, now, 0);
  std::vector<float> rows, expected(touched.size() * 8);
  ASSERT_TRUE(client.Pull("words", At(4, st->generation()), touched, &rows).ok())
      << cluster_.Logs();
  ASSERT_TRUE(reference.Pull(touched, expected.data()).ok());
  ASSERT_EQ(rows.size(), expected.size());
  EXPECT_EQ(std::memcmp(rows.data(), expected.data(), rows.size() * 4), 0);
  int64_t held = 0;
  for (int s = 0; s < 2; ++s) {
    const TableStatus t = ServerStatus(now[s]).server().tables(0);
    held += t.rows();
    EXPECT_EQ(t.updates(), 4) << "server " << s;
    EXPECT_EQ(t.clock(), 4) << "server " << s;
  }
  EXPECT_EQ(held, reference.num_rows());
}

}  // namespace
}  // namespace sparse_rows
}  // namespace testing
}  // namespace pstrain
