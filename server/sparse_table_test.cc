// SparseTable: rows made on first touch the same way whatever the order,
// pushes refused whole on bad input, and the row optimizers against
// PyTorch's sparse formulas (written out in double here).
#include "server/sparse_table.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "common/job_sizes.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

TableConfig Config(RowOptimizer::Type type, int width = 4) {
  TableConfig c;
  c.name = "words";
  c.width = width;
  c.init_scale = 0.5f;
  c.seed = 7;
  c.optimizer.type = type;
  c.optimizer.lr = 0.1;
  return c;
}

std::vector<float> PullRows(SparseTable& t, const std::vector<uint64_t>& ids) {
  std::vector<float> out(ids.size() * t.width());
  EXPECT_TRUE(t.Pull(ids, out.data()).ok());
  return out;
}

TEST(SparseTableTest, RowsAreMadeOnFirstTouchTheSameWhateverTheOrder) {
  SparseTable a(Config(RowOptimizer::Type::kSgd)), b(Config(RowOptimizer::Type::kSgd));
  const std::vector<uint64_t> ids = {3, 1ull << 63, 3, 42, 0};
  const std::vector<float> rows = PullRows(a, ids);
  EXPECT_EQ(a.num_rows(), 4);  // 3 repeats
  // b makes them in another order, and more besides: the same rows.
  PullRows(b, {0, 99, 42, 1ull << 63, 3});
  for (size_t i = 0; i < ids.size(); ++i) {
    const float* row = b.Row(ids[i]);
    ASSERT_NE(row, nullptr);
    for (int j = 0; j < a.width(); ++j) {
      EXPECT_EQ(rows[i * a.width() + j], row[j]) << ids[i];
      EXPECT_LE(std::abs(row[j]), 0.5f);
    }
  }
  // Rows differ from each other and from another table's or seed's.
  EXPECT_NE(rows[0], rows[3 * a.width()]);  // ids 3 and 42
  TableConfig other = Config(RowOptimizer::Type::kSgd);
  other.name = "tags";
  SparseTable c(other);
  EXPECT_NE(PullRows(c, {3})[0], rows[0]);
  EXPECT_EQ(a.Row(12345), nullptr);
}

TEST(SparseTableTest, BadPushesAreRefusedWholeAndNothingMoves) {
  SparseTable t(Config(RowOptimizer::Type::kAdam));
  const std::vector<float> before = PullRows(t, {1, 2});
  const std::vector<float> g(8, 1.0f);
  // A row never pulled, even beside good ones.
  absl::Status st = t.Push(std::vector<uint64_t>{1, 77}, g);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  // A repeated id, and the wrong number of floats.
  EXPECT_EQ(t.Push(std::vector<uint64_t>{1, 1}, g).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.Push(std::vector<uint64_t>{1, 2}, std::vector<float>(7)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.updates(), 0);
  EXPECT_EQ(PullRows(t, {1, 2}), before);
  EXPECT_EQ(t.num_rows(), 2);  // the refused push made no row
  EXPECT_TRUE(t.Push(std::vector<uint64_t>{2, 1}, g).ok());
  EXPECT_EQ(t.updates(), 1);
}

// torch.optim.SparseAdam, lazily: row 1 is touched at updates 1 and 3, row
// 2 only at update 2; bias correction counts the table's updates.
TEST(SparseTableTest, AdamIsPyTorchsSparseAdam) {
  TableConfig c = Config(RowOptimizer::Type::kAdam, 3);
  SparseTable t(c);
  PullRows(t, {1, 2});
  struct Row {
    std::vector<double> w, m, v;
  };
  Row ref[3];
  for (uint64_t id : {1, 2}) {
    const float* w = t.Row(id);
    ref[id] = {{w[0], w[1], w[2]}, {0, 0, 0}, {0, 0, 0}};
  }
  const std::vector<std::pair<uint64_t, std::vector<float>>> pushes = {
      {1, {0.5f, -2.0f, 1e-3f}}, {2, {3.0f, 0.0f, -0.25f}}, {1, {-1.0f, 0.75f, 4.0f}}};
  for (size_t u = 0; u < pushes.size(); ++u) {
    const auto& [id, g] = pushes[u];
    ASSERT_TRUE(t.Push(std::vector<uint64_t>{id}, g).ok());
    const double step = u + 1.0;
    const double size = c.optimizer.lr * std::sqrt(1 - std::pow(c.optimizer.beta2, step)) /
                        (1 - std::pow(c.optimizer.beta1, step));
    Row& r = ref[id];
    for (int j = 0; j < 3; ++j) {
      r.m[j] += (g[j] - r.m[j]) * (1 - c.optimizer.beta1);
      r.v[j] += (double{g[j]} * g[j] - r.v[j]) * (1 - c.optimizer.beta2);
      r.w[j] -= size * r.m[j] / (std::sqrt(r.v[j]) + c.optimizer.eps);
    }
  }
  for (uint64_t id : {1, 2}) {
    for (int j = 0; j < 3; ++j) {
      EXPECT_NEAR(t.Row(id)[j], ref[id].w[j], 1e-6 * (1 + std::abs(ref[id].w[j])))
          << id << "," << j;
    }
  }
}

TEST(SparseTableTest, AdagradAndSgdArePyTorchs) {
  TableConfig c = Config(RowOptimizer::Type::kAdagrad, 2);
  c.optimizer.eps = 1e-10;
  c.optimizer.lr_decay = 0.01;
  c.optimizer.initial_accumulator = 0.1;
  SparseTable adagrad(c);
  SparseTable sgd(Config(RowOptimizer::Type::kSgd, 2));
  PullRows(adagrad, {5});
  PullRows(sgd, {5});
  std::vector<double> w = {adagrad.Row(5)[0], adagrad.Row(5)[1]}, s = {0.1, 0.1};
  std::vector<double> plain = {sgd.Row(5)[0], sgd.Row(5)[1]};
  const std::vector<std::vector<float>> grads = {{1.0f, -0.5f}, {0.25f, 2.0f}};
  for (size_t u = 0; u < grads.size(); ++u) {
    ASSERT_TRUE(adagrad.Push(std::vector<uint64_t>{5}, grads[u]).ok());
    ASSERT_TRUE(sgd.Push(std::vector<uint64_t>{5}, grads[u]).ok());
    const double clr = c.optimizer.lr / (1 + u * c.optimizer.lr_decay);
    for (int j = 0; j < 2; ++j) {
      s[j] += double{grads[u][j]} * grads[u][j];
      w[j] -= clr * grads[u][j] / (std::sqrt(s[j]) + 1e-10);
      plain[j] -= 0.1 * grads[u][j];
    }
  }
  for (int j = 0; j < 2; ++j) {
    EXPECT_NEAR(adagrad.Row(5)[j], w[j], 1e-6 * (1 + std::abs(w[j])));
    EXPECT_NEAR(sgd.Row(5)[j], plain[j], 1e-6 * (1 + std::abs(plain[j])));
  }
}

TEST(SparseTableTest, CoalesceSumsRepeatsInFirstSeenOrder) {
  std::vector<uint64_t> ids;
  std::vector<float> summed;
  CoalesceRows(std::vector<uint64_t>{9, 4, 9, 9},
               std::vector<float>{1, 2, 10, 20, 100, 200, 1000, 2000}, 2, &ids, &summed);
  EXPECT_EQ(ids, (std::vector<uint64_t>{9, 4}));
  EXPECT_EQ(summed, (std::vector<float>{1101, 2202, 10, 20}));
}

TEST(SparseTableTest, ServerOfRowSpreadsConsecutiveIds) {
  int count[3] = {0, 0, 0};
  for (uint64_t id = 0; id < 90000; ++id) ++count[ServerOfRow(id, 3)];
  for (int c : count) EXPECT_NEAR(c, 30000, 1500);
  EXPECT_EQ(ServerOfRow(12345, 1), 0);
}

// A table within a memory budget: at most the budget's rows in memory, the
// others in the spill file, and every row -- weights and optimizer state --
// exactly as a table without a bound makes and updates it.
TEST(SparseTableTest, RowsBeyondTheBudgetWaitOnDiskAndComeBackBitForBit) {
  TableConfig bounded_config = Config(RowOptimizer::Type::kAdam, 8);
  // A row in memory: its weights and state, and its bookkeeping.
  const int64_t row_bytes = (8 + 16) * 4 + kRowBookkeepingBytes;
  bounded_config.resident_bytes = 50 * row_bytes;
  const char* tmp = std::getenv("TEST_TMPDIR");
  bounded_config.spill_dir = tmp != nullptr ? tmp : "/tmp";
  SparseTable bounded(bounded_config), unbounded(Config(RowOptimizer::Type::kAdam, 8));
  std::mt19937_64 rng(3);
  for (int round = 0; round < 40; ++round) {
    // 40 distinct ids of a pool of 400: the touched ids grow to 8x the budget.
    std::vector<uint64_t> ids;
    while (ids.size() < 40) {
      const uint64_t id = rng() % 400;
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    }
    EXPECT_EQ(PullRows(bounded, ids), PullRows(unbounded, ids));
    std::vector<float> grads(ids.size() * 8);
    for (float& g : grads) g = std::normal_distribution<float>()(rng);
    ASSERT_TRUE(bounded.Push(ids, grads).ok());
    ASSERT_TRUE(unbounded.Push(ids, grads).ok());
    ASSERT_LE(bounded.rows().resident, 50);
  }
  std::vector<uint64_t> all(400);
  for (uint64_t id = 0; id < 400; ++id) all[id] = id;
  const std::vector<float> a = PullRows(bounded, all), b = PullRows(unbounded, all);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
  // The optimizer state too: one more update moves both the same.
  const std::vector<float> g(all.size() * 8, 0.25f);
  ASSERT_TRUE(bounded.Push(all, g).ok());
  ASSERT_TRUE(unbounded.Push(all, g).ok());
  const std::vector<float> a2 = PullRows(bounded, all), b2 = PullRows(unbounded, all);
  EXPECT_EQ(std::memcmp(a2.data(), b2.data(), a2.size() * 4), 0);
  const TableRows where = bounded.rows();
  EXPECT_EQ(bounded.num_rows(), 400);
  EXPECT_EQ(where.resident, 50);
  EXPECT_EQ(where.on_disk, 350);
  EXPECT_GT(where.spilled, 350);
  EXPECT_GT(where.loaded, 0);
  EXPECT_EQ(unbounded.rows().on_disk, 0);
  EXPECT_EQ(bounded.memory_bytes(), 50 * row_bytes);  // what the budget bounds
}

// A table with admission keeps its filter inside its budget: the rows in
// memory are what the budget leaves beside it.
TEST(SparseTableTest, TheAdmissionFilterIsInsideTheBudget) {
  TableConfig config = Config(RowOptimizer::Type::kSgd, 4);
  const int64_t row_bytes = 4 * 4 + kRowBookkeepingBytes;
  config.resident_bytes = kAdmissionFilterBytes + 10 * row_bytes;
  config.admit_after = 2;
  const char* tmp = std::getenv("TEST_TMPDIR");
  config.spill_dir = tmp != nullptr ? tmp : "/tmp";
  SparseTable t(config);
  std::vector<uint64_t> ids(100);
  for (uint64_t id = 0; id < 100; ++id) ids[id] = id;
  const std::vector<float> g(ids.size() * 4, 1.0f);
  for (int i = 0; i < 2; ++i) {  // seen twice: admitted
    (void)PullRows(t, ids);
    ASSERT_TRUE(t.Push(ids, g).ok());
  }
  EXPECT_EQ(t.num_rows(), 100);
  EXPECT_EQ(t.rows().resident, 10);
  EXPECT_EQ(t.memory_bytes(), config.resident_bytes);
}

// A spill file that cannot be made: the pull that needs it fails with
// INTERNAL, naming the directory; the rows in memory stay.
TEST(SparseTableTest, ASpillFileThatCannotBeMadeIsAnError) {
  TableConfig config = Config(RowOptimizer::Type::kSgd);
  config.resident_bytes = 2 * (4 * 4 + kRowBookkeepingBytes);  // 2 rows of width 4
  config.spill_dir = "/nonexistent/pstrain";
  SparseTable t(config);
  const std::vector<float> first = PullRows(t, {1, 2});
  std::vector<float> out(4);
  const absl::Status st = t.Pull({3}, out.data());
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal);
  EXPECT_NE(st.message().find("/nonexistent/pstrain"), std::string::npos) << st;
  EXPECT_EQ(PullRows(t, {1, 2}), first);
}

// Admission after 3 sightings: an id reads as zeros and its first two
// updates are dropped; the third makes its row (the initializer's values,
// as a table without admission makes it) and applies to it.
TEST(SparseTableTest, AnIdGetsItsRowAtItsThirdUpdate) {
  TableConfig config = Config(RowOptimizer::Type::kSgd);
  config.admit_after = 3;
  SparseTable t(config), plain(Config(RowOptimizer::Type::kSgd));
  const std::vector<float> g = {1, 2, 3, 4};
  for (int seen = 1; seen <= 2; ++seen) {
    EXPECT_EQ(PullRows(t, {9}), std::vector<float>(4, 0.0f));
    ASSERT_TRUE(t.Push({9}, g).ok()) << "a push of an id not admitted is a sighting";
    EXPECT_EQ(t.num_rows(), 0);
    EXPECT_EQ(t.rows().dropped, seen);
  }
  ASSERT_TRUE(t.Push({9}, g).ok());
  EXPECT_EQ(t.num_rows(), 1);
  EXPECT_EQ(t.rows().created, 1);
  std::vector<float> expected = PullRows(plain, {9});
  for (int j = 0; j < 4; ++j) expected[j] -= 0.1f * g[j];
  EXPECT_EQ(PullRows(t, {9}), expected);
  EXPECT_EQ(t.rows().dropped, 2);
}

// The counting filter never counts an id below its sightings, also when
// far more ids than counters collide.
TEST(SparseTableTest, SeenCountsNeverUndercount) {
  SeenCounts counts(1024);
  std::vector<int> truth(5000, 0);
  std::mt19937_64 rng(5);
  for (int i = 0; i < 20000; ++i) {
    const uint64_t id = rng() % truth.size();
    ++truth[id];
    ASSERT_GE(counts.Add(id), std::min(truth[id], 255)) << id;
  }
}

// Expiry after 4 clocks: a row untouched in the 4 clocks after the one it
// was last touched in is dropped (its cell reused), a push for it then is
// dropped and counted, and a pull makes it anew from the initializer; rows
// touched stay. With expire_after 1, the rows of the clock just ended stay.
TEST(SparseTableTest, RowsUntouchedForTheirClocksExpire) {
  TableConfig config = Config(RowOptimizer::Type::kAdagrad);
  config.expire_after = 4;
  SparseTable t(config);
  const std::vector<float> fresh = PullRows(t, {1, 2});
  ASSERT_TRUE(t.Push({1, 2}, std::vector<float>(8, 1.0f)).ok());
  for (int64_t clock = 1; clock <= 4; ++clock) {
    t.Advance(clock);
    PullRows(t, {1});
  }
  EXPECT_EQ(t.num_rows(), 2);  // 2 was touched in clock 0, untouched in 1-3 (4 not over)
  t.Advance(5);
  EXPECT_EQ(t.num_rows(), 1);
  EXPECT_EQ(t.rows().expired, 1);
  EXPECT_NE(t.Row(1), nullptr);
  EXPECT_EQ(t.Row(2), nullptr);
  ASSERT_TRUE(t.Push({2}, std::vector<float>(4, 1.0f)).ok());
  EXPECT_EQ(t.rows().dropped, 1);
  const std::vector<float> again = PullRows(t, {1, 2});
  EXPECT_EQ(std::vector<float>(again.begin() + 4, again.end()),
            std::vector<float>(fresh.begin() + 4, fresh.end()));
  EXPECT_EQ(t.rows().created, 3);
  EXPECT_EQ(t.rows().resident, 2);
  TableConfig one = Config(RowOptimizer::Type::kSgd);
  one.expire_after = 1;
  SparseTable quick(one);
  PullRows(quick, {7});
  quick.Advance(1);  // the clock 7 was touched in ends
  EXPECT_EQ(quick.num_rows(), 1);
  quick.Advance(2);  // clock 1 passed without it
  EXPECT_EQ(quick.num_rows(), 0);
}

// Every row read out with ForEachRow (in memory or on disk) and put into a
// fresh table gives the same table: the same rows and the same updates.
TEST(SparseTableTest, RowsPutBackMakeTheSameTable) {
  TableConfig config = Config(RowOptimizer::Type::kAdam, 8);
  config.resident_bytes = 10 * (8 + 16) * 4;
  const char* tmp = std::getenv("TEST_TMPDIR");
  config.spill_dir = tmp != nullptr ? tmp : "/tmp";
  SparseTable t(config), copy(config);
  std::vector<uint64_t> ids(30);
  for (int i = 0; i < 30; ++i) ids[i] = 1000 + 17 * i;
  PullRows(t, ids);
  ASSERT_TRUE(t.Push(ids, std::vector<float>(30 * 8, 0.5f)).ok());
  ASSERT_GT(t.rows().on_disk, 0);
  PullRows(copy, {5, 6});  // rows the restore forgets
  copy.Reset(t.updates(), 0);
  ASSERT_TRUE(t.ForEachRow([&](uint64_t id, const float* row, int64_t touched) {
                 return copy.Put(id, row, touched);
               }).ok());
  EXPECT_EQ(copy.num_rows(), 30);
  EXPECT_EQ(copy.Put(ids[0], std::vector<float>(24).data(), 0).code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<float> g(30 * 8, -0.25f);
  ASSERT_TRUE(t.Push(ids, g).ok());
  ASSERT_TRUE(copy.Push(ids, g).ok());
  EXPECT_EQ(PullRows(t, ids), PullRows(copy, ids));
  EXPECT_EQ(copy.Row(5), nullptr);
}

}  // namespace
}  // namespace pstrain
