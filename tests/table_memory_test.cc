// Sparse tables within their budgets, through a real server under a memory
// limit the kernel enforces (tests/memory_limit.h):
//
// - 16 tables with admission (each a 4 MiB filter) and budgets of 5 MiB,
//   their ids touched to several times the budgets: the server keeps every
//   table's filter and rows in memory within its budget, the rest on disk,
//   and the whole server inside the budgets + 64 MiB (no OOM kill). Before
//   the filters counted in the budgets, the same job needed 64 MiB more.
// - A table without a budget pulled past what the server may allocate:
//   the server fails, and the scheduler's reason for the job's end -- and
//   the server's own state -- say it ran out of memory, not that a
//   heartbeat was missed.
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/job_sizes.h"
#include "common/job_spec.h"
#include "gtest/gtest.h"
#include "tests/cluster.h"
#include "tests/memory_limit.h"
#include "tests/test_jobs.h"
#include "tests/wait.h"
#include "worker/row_client.h"

namespace pstrain {
namespace testing {
namespace {

constexpr int kTables = 16;
constexpr int kWidth = 64;  // Adam: 768 bytes a row
constexpr int64_t kBudget = int64_t{5} << 20;
constexpr int64_t kOverhead = int64_t{64} << 20;

std::string Tables(int n, const std::string& extra) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    absl::StrAppend(&out, "tables { name: \"t", i, "\" width: ", kWidth,
                    " optimizer { type: ADAM learning_rate: 0.05 } ", extra, " }\n");
  }
  return out;
}

// The job as the daemons run it (defaults applied).
JobSpec TheJob(const std::string& text) {
  JobSpec job = ParseJobSpecText(text, "job").value();
  ApplyJobDefaults(&job);
  EXPECT_TRUE(ValidateJobSpec(job).ok()) << ValidateJobSpec(job);
  return job;
}

// One server under `limit` (its command line's prefix), one training
// worker (the test pulls and pushes the tables as that worker): the
// server's address once the worker trains.
std::string StartJob(Cluster* cluster, const std::string& job_text, const MemoryLimit& limit) {
  ClusterOptions options;
  options.job_text = job_text;
  options.servers = 1;
  options.workers = 1;
  options.worker_flags.assign(1, {"--straggler=fixed:5"});
  options.server_prefix = limit.prefix();
  options.scheduler_flags = {"--heartbeat_timeout_ms=3000", "--end_grace_ms=3000"};
  EXPECT_TRUE(cluster->Start(options).ok()) << cluster->Logs();
  EXPECT_TRUE(WaitForStatus(
      cluster->scheduler_address(),
      [](const ClusterStatus& st) { return SlowestClock(st) >= 2; }, absl::Seconds(60)))
      << cluster->Logs();
  absl::StatusOr<ClusterStatus> st = SchedulerStatus(cluster->scheduler_address());
  EXPECT_TRUE(st.ok());
  return st.ok() ? MemberOf(*st, SERVER, 0).address() : "";
}

RowClient Client(const JobSpec& job, const std::string& server, absl::Duration retry_window) {
  RowClientOptions options;
  options.retry_window = retry_window;
  return RowClient(job, [server] { return std::vector<std::string>{server}; }, 0, options);
}

RowCall At(int64_t clock) {
  RowCall call;
  call.clock = clock;
  return call;
}

TEST(TableMemoryTest, ManyTablesWithAdmissionStayInsideTheirBudgets) {
  absl::StatusOr<MemoryLimit> limit =
      MemoryLimit::Make("tables", kTables * kBudget + kOverhead, /*allow_rlimit=*/true);
  ASSERT_TRUE(limit.ok()) << limit.status();
  Cluster cluster("table_memory");
  const std::string text = SixteenClassJob(absl::StrCat(
      "clocks: 100000\nseed: 3\n",
      Tables(kTables, absl::StrCat("admit_after: 2 memory_budget_bytes: ", kBudget))));
  const std::string server = StartJob(&cluster, text, *limit);
  ASSERT_FALSE(server.empty());
  const JobSpec job = TheJob(text);
  RowClient client = Client(job, server, absl::Seconds(30));
  // Blocks of 1,500 new ids, each pushed in two clocks (admitted at the
  // second): 6,000 rows a table, 4.7x what its budget leaves beside the
  // filter (1,285 rows).
  for (int64_t clock = 0; clock < 8; ++clock) {
    std::vector<uint64_t> ids(1500);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = ((clock / 2) << 20) + i * 7919;
    const std::vector<float> grads(ids.size() * kWidth, 0.01f * (clock + 1));
    for (int t = 0; t < kTables; ++t) {
      const std::string name = absl::StrCat("t", t);
      std::vector<float> rows;
      const absl::Status pulled = client.Pull(name, At(clock), ids, &rows);
      ASSERT_TRUE(pulled.ok()) << pulled << cluster.Logs();
      const absl::Status pushed = client.Push(name, At(clock), 1, ids, grads);
      ASSERT_TRUE(pushed.ok()) << pushed << cluster.Logs();
    }
  }
  const MemberStatus st = ServerStatus(server);
  ASSERT_EQ(st.server().tables_size(), kTables);
  for (const TableStatus& t : st.server().tables()) {
    EXPECT_LE(t.resident_bytes(), kBudget) << t.name();
    EXPECT_GE(t.resident_bytes(), kAdmissionFilterBytes) << t.name();
    EXPECT_EQ(t.rows(), 6000) << t.name();
    EXPECT_GT(t.rows_on_disk(), 4000) << t.name();
  }
  std::printf("%s: %d tables, rss %.1f MB (budgets %.1f MB + 64 MiB); cgroup peak %.1f MB\n",
              limit->Describe().c_str(), kTables, st.rss_bytes() / 1e6,
              kTables * kBudget / 1e6, limit->PeakBytes() / 1e6);
  EXPECT_LE(st.rss_bytes(), kTables * kBudget + kOverhead);
  EXPECT_EQ(limit->OomKills(), 0);
  EXPECT_EQ(st.state(), RUNNING);
}

TEST(TableMemoryTest, AServerOutOfMemoryIsTheJobsReason) {
  // A failed allocation (RLIMIT_DATA), not a kill the process cannot see.
  setenv("PSTRAIN_MEMORY_LIMIT", "rlimit", 1);
  absl::StatusOr<MemoryLimit> limit =
      MemoryLimit::Make("oom", int64_t{256} << 20, /*allow_rlimit=*/true);
  unsetenv("PSTRAIN_MEMORY_LIMIT");
  ASSERT_TRUE(limit.ok()) << limit.status();
  ASSERT_EQ(limit->kind(), MemoryLimit::kRlimitData);
  Cluster cluster("table_oom");
  // One table, no budget, rows of 1,024 floats and Adam's state: 12 KiB each.
  const std::string text = SixteenClassJob(
      "clocks: 100000\nseed: 3\n"
      "tables { name: \"wide\" width: 1024 optimizer { type: ADAM learning_rate: 0.05 } }\n");
  const std::string server = StartJob(&cluster, text, *limit);
  ASSERT_FALSE(server.empty());
  RowClient client = Client(TheJob(text), server, absl::Seconds(2));
  absl::Status pulled;
  for (int64_t block = 0; block < 40 && pulled.ok(); ++block) {  // 960 MB of rows at most
    std::vector<uint64_t> ids(2000);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = (block << 20) + i;
    std::vector<float> rows;
    pulled = client.Pull("wide", At(0), ids, &rows);
  }
  ASSERT_FALSE(pulled.ok()) << "the server never ran out of memory under " << limit->Describe();
  const absl::StatusOr<int> code = cluster.WaitAll(absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << code.status() << cluster.Logs();
  EXPECT_EQ(*code, 1);
  const absl::StatusOr<ClusterStatus> ended = cluster.FinalStatus();
  ASSERT_TRUE(ended.ok()) << ended.status();
  const ClusterStatus& final = *ended;
  EXPECT_EQ(final.job_state(), ABORTED);
  EXPECT_TRUE(absl::StrContains(final.message(), "server 0 failed: out of memory"))
      << final.message();
  const MemberStatus dead = MemberOf(final, SERVER, 0);
  EXPECT_EQ(dead.state(), FAILED);
  EXPECT_TRUE(absl::StrContains(dead.message(), "out of memory")) << dead.message();
  std::printf("the server under %s: the job's reason: %s\n", limit->Describe().c_str(),
              final.message().c_str());
}

}  // namespace
}  // namespace testing
}  // namespace pstrain
