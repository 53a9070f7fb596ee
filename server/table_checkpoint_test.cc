// A table's checkpoint file: a table restored from it goes on exactly as
// the table it was written from -- rows, optimizer state and update count,
// each row's touched clock (expiry) and the admission counts -- and a file
// that does not fit is refused with nothing changed. Two servers' parts
// restore as a third server's under another placement (the rows it holds
// now of both), and parts that are not of one checkpoint are refused.
#include "server/table_checkpoint.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

TableConfig Config() {
  TableConfig c;
  c.name = "words";
  c.width = 4;
  c.init_scale = 0.5f;
  c.seed = 3;
  c.optimizer.type = RowOptimizer::Type::kAdam;
  c.optimizer.lr = 0.1;
  c.admit_after = 2;
  c.expire_after = 2;
  c.resident_bytes = 3 * 12 * 4;  // 3 rows in memory: the others spill
  const char* tmp = std::getenv("TEST_TMPDIR");
  c.spill_dir = tmp != nullptr ? tmp : "/tmp";
  return c;
}

// Clock c of a little workload: ids c..c+5 pulled and pushed.
void Step(SparseTable& t, int64_t c) {
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < 6; ++i) ids.push_back(static_cast<uint64_t>(c) + i);
  std::vector<float> rows(ids.size() * 4), grads(ids.size() * 4);
  ASSERT_TRUE(t.Pull(ids, rows.data()).ok());
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.1f * static_cast<float>(i) - c;
  ASSERT_TRUE(t.Push(ids, grads).ok());
  t.Advance(c + 1);
}

std::vector<float> All(SparseTable& t) {
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < 20; ++i) ids.push_back(i);
  std::vector<float> rows(ids.size() * 4);
  EXPECT_TRUE(t.Pull(ids, rows.data()).ok());
  return rows;
}

TEST(TableCheckpointTest, ARestoredTableGoesOnAsTheOriginal) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/t.safetensors");
  SparseTable original(Config()), restored(Config());
  for (int64_t c = 0; c < 5; ++c) Step(original, c);
  ASSERT_GT(original.rows().on_disk, 0);
  ASSERT_GT(original.rows().expired, 0);
  ASSERT_TRUE(WriteTableCheckpoint(path, 1, 5, original).ok());
  Step(restored, 0);  // state the restore replaces
  ASSERT_TRUE(ReadTableCheckpoint(path, 1, 5, &restored).ok());
  EXPECT_EQ(restored.num_rows(), original.num_rows());
  EXPECT_EQ(restored.updates(), original.updates());
  EXPECT_EQ(restored.clock(), 5);
  for (int64_t c = 5; c < 9; ++c) {
    Step(original, c);
    Step(restored, c);
    EXPECT_EQ(restored.num_rows(), original.num_rows()) << "clock " << c;
  }
  EXPECT_EQ(All(restored), All(original));
}

TEST(TableCheckpointTest, AFileThatDoesNotFitIsRefusedAndChangesNothing) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/u.safetensors");
  SparseTable source(Config());
  for (int64_t c = 0; c < 3; ++c) Step(source, c);
  ASSERT_TRUE(WriteTableCheckpoint(path, 0, 3, source).ok());
  SparseTable target(Config());
  Step(target, 0);
  const int64_t rows = target.num_rows();
  EXPECT_EQ(ReadTableCheckpoint(path, 1, 3, &target).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadTableCheckpoint(path, 0, 4, &target).code(), absl::StatusCode::kInvalidArgument);
  TableConfig other = Config();
  other.name = "tags";
  SparseTable tags(other);
  EXPECT_EQ(ReadTableCheckpoint(path, 0, 3, &tags).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadTableCheckpoint(path + ".missing", 0, 3, &target).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(target.num_rows(), rows);
  EXPECT_EQ(target.clock(), 1);
}

// Clock c of a part's workload: ids 2(c+i) + parity, i in [0, 6).
void StepPart(SparseTable& t, int64_t c, uint64_t parity) {
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < 6; ++i) ids.push_back(2 * (static_cast<uint64_t>(c) + i) + parity);
  std::vector<float> rows(ids.size() * 4), grads(ids.size() * 4);
  ASSERT_TRUE(t.Pull(ids, rows.data()).ok());
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.1f * static_cast<float>(i) - c;
  ASSERT_TRUE(t.Push(ids, grads).ok());
  t.Advance(c + 1);
}

std::vector<float> Rows(SparseTable& t, const std::vector<uint64_t>& ids) {
  std::vector<float> rows(ids.size() * 4);
  EXPECT_TRUE(t.Pull(ids, rows.data()).ok());
  return rows;
}

TEST(TableCheckpointTest, TwoServersPartsRestoreAsAThirdsUnderAnotherPlacement) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp != nullptr ? tmp : "/tmp";
  TableConfig config = Config();
  config.admit_after = 0;  // admission counts are not kept by row
  config.expire_after = 0;
  SparseTable even(config), odd(config);
  for (int64_t c = 0; c < 5; ++c) {
    StepPart(even, c, 0);
    StepPart(odd, c, 1);
  }
  const std::vector<TablePart> parts = {{0, dir + "/part0.safetensors"},
                                        {1, dir + "/part1.safetensors"}};
  ASSERT_TRUE(WriteTableCheckpoint(parts[0].path, 0, 5, even).ok());
  ASSERT_TRUE(WriteTableCheckpoint(parts[1].path, 1, 5, odd).ok());
  // The new placement gives this server the ids divisible by 3, of both parts.
  SparseTable merged(config);
  ASSERT_TRUE(
      ReadTableCheckpoints(parts, 5, &merged, [](uint64_t id) { return id % 3 == 0; }).ok());
  std::vector<uint64_t> kept_even, kept_odd;
  for (uint64_t id = 0; id < 20; ++id) {
    if (id % 3 == 0) (id % 2 == 0 ? kept_even : kept_odd).push_back(id);
  }
  EXPECT_EQ(merged.num_rows(), static_cast<int64_t>(kept_even.size() + kept_odd.size()));
  EXPECT_EQ(merged.updates(), even.updates());
  EXPECT_EQ(merged.clock(), 5);
  EXPECT_EQ(Rows(merged, kept_even), Rows(even, kept_even));
  EXPECT_EQ(Rows(merged, kept_odd), Rows(odd, kept_odd));

  // Parts that disagree on the update count are not one checkpoint; a
  // table with admission cannot merge its counts: nothing changes.
  SparseTable behind(config);
  for (int64_t c = 0; c < 4; ++c) StepPart(behind, c, 1);
  const std::string behind_path = dir + "/behind.safetensors";
  ASSERT_TRUE(WriteTableCheckpoint(behind_path, 1, 5, behind).ok());
  SparseTable target(config);
  EXPECT_EQ(ReadTableCheckpoints({parts[0], {1, behind_path}}, 5, &target, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(target.num_rows(), 0);
  SparseTable admitted(Config());
  EXPECT_EQ(ReadTableCheckpoints(parts, 5, &admitted, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pstrain
