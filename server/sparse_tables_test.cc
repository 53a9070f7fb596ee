#include "server/sparse_tables.h"

#include <cstring>
#include <vector>

#include "common/job_spec.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

// The job `text` with its defaults, validated.
absl::StatusOr<JobSpec> Job(const std::string& text) {
  absl::StatusOr<JobSpec> job = ParseJobSpecText(text, "job.pbtxt");
  if (!job.ok()) return job.status();
  ApplyJobDefaults(&*job);
  if (absl::Status st = ValidateJobSpec(*job); !st.ok()) return st;
  return job;
}

// A job with two tables: "words" (width 4, Adagrad, ids below 1000) and
// "tags" (width 2, SGD, any id), spread over 2 servers.
JobSpec TwoTablesJob() {
  absl::StatusOr<JobSpec> job = Job(R"pb(
    num_servers: 2
    seed: 7
    tables {
      name: "words"
      width: 4
      num_ids: 1000
      optimizer { type: ADAGRAD learning_rate: 0.5 }
    }
    tables {
      name: "tags"
      width: 2
      init_scale: 0.25
      optimizer { type: SGD learning_rate: 0.1 }
    }
  )pb");
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

// The ids below `limit` that server `server` of 2 holds.
std::vector<uint64_t> IdsOf(int server, uint64_t limit) {
  std::vector<uint64_t> ids;
  for (uint64_t id = 0; id < limit; ++id) {
    if (ServerOfRow(id, 2) == server) ids.push_back(id);
  }
  return ids;
}

TEST(SparseTablesTest, AJobsTablesTakeItsDefaultsAndAreChecked) {
  const JobSpec job = TwoTablesJob();
  EXPECT_FLOAT_EQ(job.tables(0).init_scale(), 0.25f);  // 1 / width
  EXPECT_FLOAT_EQ(job.tables(0).optimizer().epsilon(), 1e-10f);
  const RowOptimizer words = RowOptimizerOf(job.tables(0).optimizer());
  EXPECT_EQ(words.type, RowOptimizer::Type::kAdagrad);
  EXPECT_DOUBLE_EQ(words.lr, 0.5);
  EXPECT_DOUBLE_EQ(words.eps, 1e-10f);
  EXPECT_EQ(RowOptimizerOf(job.tables(1).optimizer()).type, RowOptimizer::Type::kSgd);
  for (const char* bad : {
           R"pb(tables { name: "a" width: 0 })pb",
           R"pb(tables { name: "a b" width: 4 })pb",
           R"pb(tables { name: "a" width: 4 } tables { name: "a" width: 8 })pb",
           R"pb(tables { name: "a" width: 4 optimizer { type: ADAMW } })pb",
           R"pb(tables { name: "a" width: 4 optimizer { type: SGD clip_norm: 1 } })pb",
           R"pb(tables { name: "a" width: 4 optimizer { type: SGD learning_rate: -1 } })pb",
           R"pb(tables { name: "a" width: 4 init_scale: -1 })pb",
       }) {
    const absl::StatusOr<JobSpec> job = Job(bad);
    ASSERT_FALSE(job.ok()) << bad;
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(job.status().message().find("table 'a"), std::string::npos) << job.status();
  }
}

// The same rows whichever server's tables make them, and each server only
// its own ids; a pull then a push moves exactly the pushed rows.
TEST(SparseTablesTest, PullsMakeRowsAndPushesMoveOnlyTheirOwn) {
  const JobSpec job = TwoTablesJob();
  SparseTables server0(job, 0, 2);
  const std::vector<uint64_t> ids = IdsOf(0, 40);
  ASSERT_GE(ids.size(), 8u);
  std::vector<float> rows;
  ASSERT_TRUE(server0.Pull(0, "words", ids, &rows).ok());
  ASSERT_EQ(rows.size(), ids.size() * 4);
  for (float v : rows) EXPECT_LE(std::abs(v), 0.25f);
  // A lone table with the same config makes the same rows.
  SparseTable alone(TableConfig{"words", 4, 0.25f, 7, RowOptimizerOf(job.tables(0).optimizer())});
  std::vector<float> expected(rows.size());
  alone.Pull(ids, expected.data());
  EXPECT_EQ(std::memcmp(rows.data(), expected.data(), rows.size() * 4), 0);

  const std::vector<uint64_t> pushed = {ids[1], ids[3]};
  const std::vector<float> grads = {1, 2, 3, 4, -1, -2, -3, -4};
  ASSERT_TRUE(server0.Push(0, "words", pushed, grads).ok());
  ASSERT_TRUE(alone.Push(pushed, grads).ok());
  std::vector<float> after;
  ASSERT_TRUE(server0.Pull(0, "words", ids, &after).ok());
  alone.Pull(ids, expected.data());
  EXPECT_EQ(std::memcmp(after.data(), expected.data(), after.size() * 4), 0);
  for (size_t r = 0; r < ids.size(); ++r) {
    const bool moved = r == 1 || r == 3;
    EXPECT_EQ(std::memcmp(&after[r * 4], &rows[r * 4], 16) != 0, moved) << r;
  }

  const std::vector<TableStatus> st = server0.Status();
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0].name(), "words");
  EXPECT_EQ(st[0].rows(), static_cast<int64_t>(ids.size()));
  EXPECT_EQ(st[0].bytes(), static_cast<int64_t>(ids.size()) * (4 + 4) * 4);  // weights + Adagrad's sums
  EXPECT_EQ(st[0].rows_pulled(), 2 * static_cast<int64_t>(ids.size()));
  EXPECT_EQ(st[0].rows_pushed(), 2);
  EXPECT_EQ(st[0].updates(), 1);
  EXPECT_EQ(st[1].name(), "tags");
  EXPECT_EQ(st[1].rows(), 0);
  EXPECT_EQ(server0.refused(), 0);
}

// Each bad request: its status, counted, nothing made or applied.
TEST(SparseTablesTest, BadRequestsAreRefusedWholeAndCounted) {
  SparseTables server0(TwoTablesJob(), 0, 2);
  const std::vector<uint64_t> mine = IdsOf(0, 40), theirs = IdsOf(1, 40);
  std::vector<float> rows;
  ASSERT_TRUE(server0.Pull(0, "words", {mine[0], mine[1]}, &rows).ok());
  const std::vector<float> before = rows;

  EXPECT_EQ(server0.Pull(0, "nouns", {mine[0]}, &rows).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(server0.Pull(1, "words", {mine[0]}, &rows).code(),  // the job has worker 0 only
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(server0.Push(0, "nouns", {mine[0]}, {1, 2, 3, 4}).code(), absl::StatusCode::kNotFound);
  // Out of range: refused before any row is made, even with good ids before it.
  uint64_t far = 1000;
  while (ServerOfRow(far, 2) != 0) ++far;
  EXPECT_EQ(server0.Pull(0, "words", {mine[2], far}, &rows).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(server0.Pull(0, "words", {mine[2], theirs[0]}, &rows).code(),
            absl::StatusCode::kInvalidArgument);
  // Pushes: a wrong width, a repeated id, a row never pulled.
  EXPECT_EQ(server0.Push(0, "words", {mine[0]}, {1, 2, 3}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(server0.Push(0, "words", {mine[0], mine[0]}, std::vector<float>(8, 1)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(server0.Push(0, "words", {mine[0], mine[5]}, std::vector<float>(8, 1)).code(),
            absl::StatusCode::kFailedPrecondition);
  // A pull over the byte limit.
  std::vector<uint64_t> many(kMaxRowBytesPerRequest / 16 + 1, mine[0]);
  EXPECT_EQ(server0.Pull(0, "words", many, &rows).code(), absl::StatusCode::kInvalidArgument);

  const std::vector<TableStatus> st = server0.Status();
  EXPECT_EQ(st[0].rows(), 2);  // none made by a refused pull
  EXPECT_EQ(st[0].updates(), 0);
  EXPECT_EQ(st[0].refused(), 6);
  EXPECT_EQ(server0.refused(), 9);  // those naming "nouns" or worker 1 too
  ASSERT_TRUE(server0.Pull(0, "words", {mine[0], mine[1]}, &rows).ok());
  EXPECT_EQ(rows, before);
}

}  // namespace
}  // namespace pstrain
