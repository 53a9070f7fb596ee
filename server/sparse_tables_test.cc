#include "server/sparse_tables.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_names.h"
#include "common/job_spec.h"
#include "gtest/gtest.h"
#include "server/checkpoint.h"

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
           R"pb(tables { name: "a" width: 4 }
                tables { name: "a" width: 8 })pb",
           R"pb(tables {
                  name: "a"
                  width: 4
                  optimizer { type: ADAMW }
                })pb",
           R"pb(tables {
                  name: "a"
                  width: 4
                  optimizer { type: SGD clip_norm: 1 }
                })pb",
           R"pb(tables {
                  name: "a"
                  width: 4
                  optimizer { type: SGD learning_rate: -1 }
                })pb",
           R"pb(tables { name: "a" width: 4 init_scale: -1 })pb",
           R"pb(tables { name: "a" width: 4 memory_budget_bytes: -1 })pb",
           R"pb(tables { name: "a" width: 4 admit_after: 256 })pb",
           R"pb(tables { name: "a" width: 4 admit_after: -1 })pb",
           R"pb(tables { name: "a" width: 4 expire_after_clocks: -5 })pb",
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
  ASSERT_TRUE(server0.Pull(0, 0, "words", 0, ids, &rows).ok());
  ASSERT_EQ(rows.size(), ids.size() * 4);
  for (float v : rows) EXPECT_LE(std::abs(v), 0.25f);
  // A lone table with the same config makes the same rows.
  SparseTable alone(TableConfig{"words", 4, 0.25f, 7, RowOptimizerOf(job.tables(0).optimizer())});
  std::vector<float> expected(rows.size());
  ASSERT_TRUE(alone.Pull(ids, expected.data()).ok());
  EXPECT_EQ(std::memcmp(rows.data(), expected.data(), rows.size() * 4), 0);

  const std::vector<uint64_t> pushed = {ids[1], ids[3]};
  const std::vector<float> grads = {1, 2, 3, 4, -1, -2, -3, -4};
  ASSERT_TRUE(server0.Push(0, 0, "words", 0, /*clock=*/0, 1, pushed, grads).ok());
  ASSERT_TRUE(alone.Push(pushed, grads).ok());
  std::vector<float> after;
  ASSERT_TRUE(server0.Pull(0, 0, "words", 0, ids, &after).ok());
  ASSERT_TRUE(alone.Pull(ids, expected.data()).ok());
  EXPECT_EQ(std::memcmp(after.data(), expected.data(), after.size() * 4), 0);
  for (size_t r = 0; r < ids.size(); ++r) {
    const bool moved = r == 1 || r == 3;
    EXPECT_EQ(std::memcmp(&after[r * 4], &rows[r * 4], 16) != 0, moved) << r;
  }

  const std::vector<TableStatus> st = server0.Status();
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0].name(), "words");
  EXPECT_EQ(st[0].rows(), static_cast<int64_t>(ids.size()));
  EXPECT_EQ(st[0].bytes(),
            static_cast<int64_t>(ids.size()) * (4 + 4) * 4);  // weights + Adagrad's sums
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
  ASSERT_TRUE(server0.Pull(0, 0, "words", 0, {mine[0], mine[1]}, &rows).ok());
  const std::vector<float> before = rows;

  EXPECT_EQ(server0.Pull(0, 0, "nouns", 0, {mine[0]}, &rows).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(server0.Pull(1, 0, "words", 0, {mine[0]}, &rows).code(),  // the job has worker 0 only
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(server0.Push(0, 0, "nouns", 0, 0, 1, {mine[0]}, {1, 2, 3, 4}).code(),
            absl::StatusCode::kNotFound);
  // Out of range: refused before any row is made, even with good ids before it.
  uint64_t far = 1000;
  while (ServerOfRow(far, 2) != 0) ++far;
  EXPECT_EQ(server0.Pull(0, 0, "words", 0, {mine[2], far}, &rows).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(server0.Pull(0, 0, "words", 0, {mine[2], theirs[0]}, &rows).code(),
            absl::StatusCode::kInvalidArgument);
  // Pushes: a wrong width, a repeated id, a row never pulled.
  EXPECT_EQ(server0.Push(0, 0, "words", 0, 0, 1, {mine[0]}, {1, 2, 3}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      server0.Push(0, 0, "words", 0, 0, 1, {mine[0], mine[0]}, std::vector<float>(8, 1)).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      server0.Push(0, 0, "words", 0, 0, 1, {mine[0], mine[5]}, std::vector<float>(8, 1)).code(),
      absl::StatusCode::kFailedPrecondition);
  // A pull over the byte limit.
  std::vector<uint64_t> many(kMaxRowBytesPerRequest / 16 + 1, mine[0]);
  EXPECT_EQ(server0.Pull(0, 0, "words", 0, many, &rows).code(), absl::StatusCode::kInvalidArgument);

  const std::vector<TableStatus> st = server0.Status();
  EXPECT_EQ(st[0].rows(), 2);  // none made by a refused pull
  EXPECT_EQ(st[0].updates(), 0);
  EXPECT_EQ(st[0].refused(), 6);
  EXPECT_EQ(server0.refused(), 9);  // those naming "nouns" or worker 1 too
  ASSERT_TRUE(server0.Pull(0, 0, "words", 0, {mine[0], mine[1]}, &rows).ok());
  EXPECT_EQ(rows, before);
}

// A job of `workers` workers and one server with table "t" (width 2, SGD
// with learning rate 1: a row moves by minus the round's gradient) under
// `consistency` (the job's; the tables follow it unless `table_consistency`).
JobSpec RoundsJob(int workers, const std::string& consistency,
                  const std::string& table_consistency = "") {
  absl::StatusOr<JobSpec> job = Job(absl::StrCat(
      "num_workers: ", workers, "\nbatch_size: 12\nconsistency: ", consistency, "\n",
      consistency == "SSP" ? "staleness: 1\n" : "",
      table_consistency.empty() ? "" : absl::StrCat("table_consistency: ", table_consistency),
      R"pb(
        tables {
          name: "t"
          width: 2
          optimizer { type: SGD learning_rate: 1 }
        }
      )pb"));
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

std::vector<float> Rows(SparseTables& tables, std::vector<uint64_t> ids) {
  std::vector<float> rows;
  EXPECT_TRUE(tables.Pull(0, 0, "t", 0, ids, &rows).ok());
  return rows;
}

// BSP: a table's round closes when every live worker pushed the clock (an
// empty push too) and applies the mean over the round's samples, once;
// pulls of the next clock are readable only then.
TEST(SparseTablesTest, BspRoundAppliesTheSamplesMeanOnceEveryLiveWorkerPushed) {
  SparseTables tables(RoundsJob(3, "BSP"), 0, 1);
  const std::vector<float> start = Rows(tables, {1, 2, 3});
  EXPECT_TRUE(tables.Readable(0, "t", 0, 0));
  // Worker 0: 2 samples, rows 1 and 2; worker 1: 1 sample, rows 2 and 3.
  ASSERT_TRUE(tables.Push(0, 0, "t", 0, 0, 2, {1, 2}, {1, 2, 3, 4}).ok());
  ASSERT_TRUE(tables.Push(1, 0, "t", 0, 0, 1, {2, 3}, {5, 6, 7, 8}).ok());
  EXPECT_FALSE(tables.Readable(0, "t", 0, 1));
  EXPECT_EQ(Rows(tables, {1, 2, 3}), start);  // nothing applied yet
  EXPECT_EQ(tables.Status()[0].updates(), 0);
  // A repeat is a retry: taken once. A clock ahead is refused.
  EXPECT_TRUE(tables.Push(0, 0, "t", 0, 0, 2, {1, 2}, {1, 2, 3, 4}).ok());
  EXPECT_EQ(tables.Push(0, 0, "t", 0, 1, 2, {1}, {1, 1}).code(),
            absl::StatusCode::kInvalidArgument);
  // Worker 2's empty push (1 sample) closes the round: 4 samples.
  ASSERT_TRUE(tables.Push(2, 0, "t", 0, 0, 1, {}, {}).ok());
  EXPECT_TRUE(tables.Readable(0, "t", 0, 1));
  EXPECT_FALSE(tables.Readable(0, "t", 0, 2));
  const std::vector<float> after = Rows(tables, {1, 2, 3});
  const float mean = 1.0f / 4;
  const std::vector<float> sum = {2 * 1.0f, 2 * 2.0f, 2 * 3.0f + 5, 2 * 4.0f + 6, 7, 8};
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_FLOAT_EQ(after[i], start[i] - sum[i] * mean) << i;
  }
  TableStatus st = tables.Status()[0];
  EXPECT_EQ(st.updates(), 1);
  EXPECT_EQ(st.clock(), 1);
  EXPECT_EQ(st.consistency(), BSP);
  EXPECT_EQ(st.rows_pushed(), 4);
  EXPECT_EQ(st.refused(), 1);

  // Round 1: a dead worker is left out; the last one's removal closes it.
  ASSERT_TRUE(tables.Push(0, 0, "t", 0, 1, 1, {1}, {4, 4}).ok());
  EXPECT_EQ(tables.Push(0, 0, "t", 0, 2, 1, {1}, {4, 4}).code(),  // its push of 1 waits
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(tables.CheckPull(0, 0, "t", 0, {1}, 2).ok());  // its push of 1 reaches it
  EXPECT_EQ(tables.CheckPull(0, 0, "t", 0, {1}, 3).code(),   // would wait for itself
            absl::StatusCode::kInvalidArgument);
  tables.RemoveWorker(1);
  EXPECT_FALSE(tables.Readable(0, "t", 0, 2));
  // A worker declared dead: its pushes are refused, whatever their clock.
  EXPECT_EQ(tables.Push(1, 0, "t", 0, 1, 1, {1}, {1, 1}).code(),
            absl::StatusCode::kFailedPrecondition);
  tables.RemoveWorker(2);
  EXPECT_TRUE(tables.Readable(0, "t", 0, 2));
  const std::vector<float> last = Rows(tables, {1});
  EXPECT_FLOAT_EQ(last[0], after[0] - 4);
  EXPECT_EQ(tables.Status()[0].updates(), 2);
  // A rollback to the start puts the clocks back and forgets the rows; from
  // then on the table takes requests of the new generation only: an older
  // one's are refused (the cluster rolled back), a newer one's wait for
  // their restore; a pull of another generation is never parked.
  ASSERT_TRUE(tables.Restore(1, 0).ok());
  EXPECT_EQ(tables.Status()[0].clock(), 0);
  EXPECT_EQ(tables.Status()[0].rows(), 0);
  EXPECT_EQ(tables.Status()[0].updates(), 0);
  EXPECT_FALSE(tables.Readable(1, "t", 0, 1));
  EXPECT_TRUE(tables.Readable(0, "t", 0, 1));
  const int64_t refused = tables.Status()[0].refused();
  std::vector<float> rows;
  EXPECT_EQ(tables.Pull(0, 0, "t", 0, {1}, &rows).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(tables.Push(0, 0, "t", 0, 2, 1, {}, {}).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(tables.CheckPull(0, 2, "t", 0, {1}, 0).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(tables.Push(0, 2, "t", 0, 0, 1, {}, {}).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(tables.Status()[0].refused(), refused);  // not counted: nothing was wrong with them
  ASSERT_TRUE(tables.Pull(0, 1, "t", 0, {1}, &rows).ok());
  ASSERT_TRUE(tables.Push(0, 1, "t", 0, 0, 1, {1}, {1, 1}).ok());
}

// The finiteness rule (server/nonfinite.h) for rows: a push holding a NaN
// or an Inf is taken -- the worker's clock moves on, a BSP round closes
// over the other workers' samples -- but nothing of it is applied and it is
// counted; a round whose every push was skipped is no update at all (the
// update count, SparseAdam's t, stays). Under ASP a skipped push is no
// update either.
TEST(SparseTablesTest, APushWithANanOrAnInfIsTakenNotAppliedAndCounted) {
  const float nan = std::nanf(""), inf = std::numeric_limits<float>::infinity();
  SparseTables tables(RoundsJob(2, "BSP"), 0, 1);
  const std::vector<float> start = Rows(tables, {1, 2});
  // Round 0: worker 0's push is poisoned; worker 1's (3 samples) is the round.
  ASSERT_TRUE(tables.Push(0, 0, "t", 0, 0, 1, {1, 2}, {1, nan, 3, 4}).ok());
  ASSERT_TRUE(tables.Push(1, 0, "t", 0, 0, 3, {2}, {6, 9}).ok());
  EXPECT_TRUE(tables.Readable(0, "t", 0, 1));
  std::vector<float> after = Rows(tables, {1, 2});
  EXPECT_EQ(after[0], start[0]);  // row 1 only worker 0 touched: unchanged
  EXPECT_EQ(after[1], start[1]);
  EXPECT_FLOAT_EQ(after[2], start[2] - 6.0f);  // worker 1's alone: its mean over its 3 samples
  EXPECT_FLOAT_EQ(after[3], start[3] - 9.0f);
  TableStatus st = tables.Status()[0];
  EXPECT_EQ(st.updates(), 1);
  EXPECT_EQ(st.nonfinite_skipped(), 1);
  EXPECT_EQ(st.refused(), 0);  // taken, not refused
  // A retry of the poisoned push changes nothing and is not counted again.
  EXPECT_TRUE(tables.Push(0, 0, "t", 0, 0, 1, {1, 2}, {1, nan, 3, 4}).ok());
  EXPECT_EQ(tables.Status()[0].nonfinite_skipped(), 1);
  // Round 1: both poisoned: no update, the clock moves on.
  ASSERT_TRUE(tables.Push(0, 0, "t", 0, 1, 1, {1}, {inf, 0}).ok());
  ASSERT_TRUE(tables.Push(1, 0, "t", 0, 1, 1, {2}, {-inf, nan}).ok());
  EXPECT_TRUE(tables.Readable(0, "t", 0, 2));
  EXPECT_EQ(Rows(tables, {1, 2}), after);
  st = tables.Status()[0];
  EXPECT_EQ(st.updates(), 1);
  EXPECT_EQ(st.clock(), 2);
  EXPECT_EQ(st.nonfinite_skipped(), 3);
  EXPECT_EQ(tables.nonfinite_skipped(), 3);

  SparseTables async(RoundsJob(2, "BSP", "ASP"), 0, 1);
  const std::vector<float> first = Rows(async, {1});
  ASSERT_TRUE(async.Push(0, 0, "t", 0, 0, 1, {1}, {nan, 1}).ok());
  EXPECT_EQ(Rows(async, {1}), first);
  EXPECT_EQ(async.Status()[0].updates(), 0);
  EXPECT_EQ(async.Status()[0].nonfinite_skipped(), 1);
  ASSERT_TRUE(async.Push(0, 0, "t", 0, 1, 1, {1}, {1, 1}).ok());  // the worker goes on
  EXPECT_EQ(async.Status()[0].updates(), 1);
}

// A job may apply them as they are (optimizer.allow_nonfinite), tables
// too; a table's own optimizer may not say so.
TEST(SparseTablesTest, AJobThatAllowsNonfiniteValuesAppliesThemToRowsToo) {
  JobSpec job = RoundsJob(1, "BSP");
  job.mutable_optimizer()->set_allow_nonfinite(true);
  SparseTables tables(job, 0, 1);
  Rows(tables, {1});
  ASSERT_TRUE(tables.Push(0, 0, "t", 0, 0, 1, {1}, {std::nanf(""), 1}).ok());
  EXPECT_TRUE(std::isnan(Rows(tables, {1})[0]));
  EXPECT_EQ(tables.Status()[0].nonfinite_skipped(), 0);
  job.mutable_tables(0)->mutable_optimizer()->set_allow_nonfinite(true);
  const absl::Status st = ValidateJobSpec(job);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("allow_nonfinite"), absl::string_view::npos) << st;
}

// One clock of worker 0 on table "t" (width 3): a pull and a push of six
// ids from clock * 3 on (each clock's batch overlaps the one before).
void TrainClock(SparseTables& t, int64_t clock) {
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < 6; ++i) ids.push_back(clock * 3 + i);
  std::vector<float> rows;
  ASSERT_TRUE(t.Pull(0, 0, "t", 0, ids, &rows).ok());
  std::vector<float> grads(ids.size() * 3);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.1f * static_cast<float>(i) - clock;
  ASSERT_TRUE(t.Push(0, 0, "t", 0, clock, 4, ids, grads).ok());
}

// Checkpoints every 2 clocks under BSP with Adam (the update count is
// state too): a server's tables restored from the files of clock 2 hold
// exactly the rows they held at clock 2, and update on from there as the
// original did; later files are deleted, earlier ones pruned; the clock a
// server reports complete needs the chunks' file too.
TEST(SparseTablesTest, ACheckpointRestoresEveryRowAndTheUpdateCount) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/table_checkpoints");
  std::filesystem::create_directories(dir);
  absl::StatusOr<JobSpec> job = Job(R"pb(
    num_workers: 1
    batch_size: 4
    tables {
      name: "t"
      width: 3
      optimizer { type: ADAM learning_rate: 0.1 }
      memory_budget_bytes: 360  # 4 rows of 3 + 6 floats: the rest on disk
    }
  )pb");
  ASSERT_TRUE(job.ok()) << job.status();
  SparseTables tables(*job, 0, 1, dir), restored(*job, 0, 1, dir);
  const CheckpointSchedule every2(2);
  tables.SetCheckpointing(dir, &every2);
  restored.SetCheckpointing(dir, &every2);
  // Deletes the server's files, the tables' with the chunks' (server/shard.h).
  CheckpointWriter files(dir, 0, "ADAM", {}, {"t"});
  std::vector<uint64_t> all(30);
  for (uint64_t i = 0; i < all.size(); ++i) all[i] = i;
  for (int64_t c = 0; c < 2; ++c) TrainClock(tables, c);
  const TableStatus at2 = tables.Status()[0];
  for (int64_t c = 2; c < 5; ++c) TrainClock(tables, c);
  EXPECT_TRUE(std::filesystem::exists(TableCheckpointPath(dir, 0, 2, "t")));
  EXPECT_TRUE(std::filesystem::exists(TableCheckpointPath(dir, 0, 4, "t")));
  EXPECT_EQ(tables.CheckpointClock(4), 0);  // no chunks' file yet
  std::ofstream(CheckpointPath(dir, 0, 2));
  std::ofstream(CheckpointPath(dir, 0, 4));
  EXPECT_EQ(tables.CheckpointClock(4), 4);
  EXPECT_EQ(tables.CheckpointClock(3), 2);

  ASSERT_TRUE(restored.Restore(0, 2).ok());
  EXPECT_TRUE(std::filesystem::exists(TableCheckpointPath(dir, 0, 4, "t")));  // the writer's
  files.Rollback(2);
  EXPECT_FALSE(std::filesystem::exists(TableCheckpointPath(dir, 0, 4, "t")));
  const TableStatus back = restored.Status()[0];
  EXPECT_EQ(back.rows(), at2.rows());
  EXPECT_EQ(back.updates(), at2.updates());
  EXPECT_EQ(back.clock(), 2);
  // The original, replayed from its own restore, and the restored copy
  // agree bit for bit after the same clocks.
  ASSERT_TRUE(tables.Restore(0, 2).ok());
  for (int64_t c = 2; c < 5; ++c) {
    TrainClock(tables, c);
    TrainClock(restored, c);
  }
  std::vector<float> a, b;
  ASSERT_TRUE(tables.Pull(0, 0, "t", 0, all, &a).ok());
  ASSERT_TRUE(restored.Pull(0, 0, "t", 0, all, &b).ok());
  EXPECT_EQ(a, b);
  EXPECT_GT(restored.Status()[0].rows_on_disk(), 0);
  std::ofstream(CheckpointPath(dir, 0, 4));  // (the rollback deleted the chunks' file too)
  EXPECT_EQ(restored.CheckpointClock(4), 4);
  files.Prune(4);
  restored.ForgetCheckpointsBefore(4);
  EXPECT_FALSE(std::filesystem::exists(TableCheckpointPath(dir, 0, 2, "t")));
  EXPECT_TRUE(std::filesystem::exists(TableCheckpointPath(dir, 0, 4, "t")));
  EXPECT_EQ(restored.CheckpointClock(3), 0);  // 2 is gone
  // A file of another table or width is refused, naming it.
  absl::StatusOr<JobSpec> wider = Job(R"pb(
    num_workers: 1
    batch_size: 4
    tables { name: "t" width: 5 }
  )pb");
  ASSERT_TRUE(wider.ok());
  SparseTables other(*wider, 0, 1, dir);
  other.SetCheckpointing(dir, &every2);
  const absl::Status refused = other.Restore(0, 4);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_EQ(other.Restore(0, 6).code(), absl::StatusCode::kNotFound);
}

TEST(SparseTablesTest, ACheckpointAskedAfterThePartReachedItsClockIsWrittenThen) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/late_checkpoints");
  std::filesystem::create_directories(dir);
  absl::StatusOr<JobSpec> job = Job(R"pb(
    num_workers: 1
    batch_size: 4
    tables { name: "t" width: 3 }
  )pb");
  ASSERT_TRUE(job.ok()) << job.status();
  SparseTables tables(*job, 0, 1, dir), restored(*job, 0, 1, dir);
  CheckpointSchedule schedule(1000);
  tables.SetCheckpointing(dir, &schedule);
  restored.SetCheckpointing(dir, &schedule);
  for (int64_t c = 0; c < 3; ++c) TrainClock(tables, c);  // at clock 3 now
  // The ask of clock 3 reaches the server after the rows of clock 2 did
  // (it comes with a dense push): the part writes it at once.
  EXPECT_FALSE(std::filesystem::exists(TableCheckpointPath(dir, 0, 3, "t")));
  ASSERT_TRUE(schedule.Ask(3));
  tables.CheckpointAsked(3);
  EXPECT_TRUE(std::filesystem::exists(TableCheckpointPath(dir, 0, 3, "t")));
  const TableStatus at3 = tables.Status()[0];
  EXPECT_FALSE(schedule.Ask(3));  // heard once
  TrainClock(tables, 3);
  ASSERT_TRUE(restored.Restore(0, 3).ok());
  EXPECT_EQ(restored.Status()[0].rows(), at3.rows());
  EXPECT_EQ(restored.Status()[0].updates(), at3.updates());
  tables.CheckpointAsked(2);  // a clock the part is past: nothing
  EXPECT_FALSE(std::filesystem::exists(TableCheckpointPath(dir, 0, 2, "t")));
}

// SSP applies each push at once and reads wait for the slowest worker
// within the bound; the hybrid runs BSP dense and ASP tables.
TEST(SparseTablesTest, SspAppliesAtOnceAndTheHybridRunsTablesAsynchronously) {
  const JobSpec ssp = RoundsJob(2, "SSP");
  EXPECT_EQ(TableMinClockForRead(ssp, 5), 4);
  SparseTables tables(ssp, 0, 1);
  const std::vector<float> start = Rows(tables, {7});
  ASSERT_TRUE(tables.Push(0, 0, "t", 0, 0, 3, {7}, {1, 1}).ok());
  ASSERT_TRUE(tables.Push(0, 0, "t", 0, 1, 3, {7}, {1, 1}).ok());
  EXPECT_EQ(Rows(tables, {7})[0], start[0] - 2);  // each at once, not averaged
  EXPECT_FALSE(tables.Readable(0, "t", 0, 1));    // worker 1 has applied nothing
  ASSERT_TRUE(tables.Push(1, 0, "t", 0, 0, 3, {}, {}).ok());
  EXPECT_TRUE(tables.Readable(0, "t", 0, 1));
  EXPECT_EQ(tables.Status()[0].updates(), 3);
  EXPECT_EQ(tables.Status()[0].consistency(), SSP);

  const JobSpec hybrid = RoundsJob(2, "BSP", "ASP");
  EXPECT_EQ(TableMinClockForRead(hybrid, 5), 0);
  EXPECT_EQ(TableMinClockForRead(RoundsJob(2, "BSP"), 5), 5);
  SparseTables async(hybrid, 0, 1);
  const std::vector<float> before = Rows(async, {7});
  ASSERT_TRUE(async.Push(0, 0, "t", 0, 0, 3, {7}, {1, 1}).ok());
  EXPECT_EQ(Rows(async, {7})[0], before[0] - 1);
  EXPECT_EQ(async.Status()[0].consistency(), ASP);
  // Tables take part in no pipeline yet.
  EXPECT_FALSE(Job(R"pb(
                 num_workers: 2
                 pipeline_stages: 2
                 tables { name: "t" width: 2 }
               )pb")
                   .ok());
}

}  // namespace
}  // namespace pstrain
