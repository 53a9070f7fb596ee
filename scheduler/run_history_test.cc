#include "scheduler/run_history.h"

#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

ClusterStatus At(int64_t clock, double loss) {
  ClusterStatus st;
  st.mutable_scheduler()->set_clock(clock);
  for (int i = 0; i < 2; ++i) {
    MemberStatus* w = st.add_members();
    w->set_role(WORKER);
    w->set_id(i);
    w->set_state(RUNNING);
    w->set_clock(clock + 1 + i);
    w->mutable_worker()->set_loss(loss + i);
    w->mutable_worker()->set_test_accuracy(i == 0 ? 0.5 : -1);
    w->mutable_worker()->set_samples_per_s(100);
  }
  return st;
}

TEST(RunHistoryTest, APointPerClockWithTheWorkersMeanLoss) {
  auto h = RunHistory::Open("");
  ASSERT_TRUE(h.ok());
  (*h)->Record(At(0, 2.0), 1000);
  (*h)->Record(At(0, 1.0), 1100);  // the clock did not move: no point
  (*h)->Record(At(1, 1.0), 1200);
  const std::vector<RunPoint> points = (*h)->Points();
  ASSERT_EQ(points.size(), 2u);
  EXPECT_EQ(points[0].loss(), 2.5);
  EXPECT_EQ(points[1].clock(), 1);
  EXPECT_EQ(points[1].unix_ms(), 1200);
  EXPECT_EQ(points[1].test_accuracy(), 0.5);
  EXPECT_EQ(points[1].worker_clocks_size(), 2);
  EXPECT_EQ(points[1].worker_clocks(1), 3);
}

// The final evaluation comes after the last clock: a changed test accuracy
// or validation loss is a point at the same clock.
TEST(RunHistoryTest, ANewEvaluationIsAPoint) {
  auto h = RunHistory::Open("");
  ASSERT_TRUE(h.ok());
  ClusterStatus st = At(5, 2.0);
  (*h)->Record(st, 1000);
  st.mutable_members(0)->mutable_worker()->set_test_accuracy(0.75);
  (*h)->Record(st, 1100);
  st.mutable_members(0)->mutable_worker()->set_unigram_entropy(3.0);
  st.mutable_members(0)->mutable_worker()->set_validation_loss(1.5);
  (*h)->Record(st, 1200);
  (*h)->Record(st, 1300);  // nothing new
  const std::vector<RunPoint> points = (*h)->Points();
  ASSERT_EQ(points.size(), 3u);
  EXPECT_EQ(points[1].test_accuracy(), 0.75);
  EXPECT_EQ(points[2].validation_loss(), 1.5);
  EXPECT_EQ(points[2].clock(), 5);
}

// A worker past its first clock that has reported no loss (0) and no rate
// (0, its first progress window not over) gives no loss and no rate (-1),
// and does not count in the others' mean: the curves start at real points.
TEST(RunHistoryTest, UnreportedLossesAndRatesAreNotPoints) {
  ClusterStatus st = At(0, 2.0);
  st.mutable_members(1)->mutable_worker()->set_loss(0);
  st.mutable_members(1)->mutable_worker()->set_samples_per_s(0);
  EXPECT_EQ(RunHistory::PointOf(st, 1).loss(), 2.0);  // worker 0's alone
  st.mutable_members(0)->mutable_worker()->set_loss(0);
  st.mutable_members(0)->mutable_worker()->set_samples_per_s(0);
  const RunPoint none = RunHistory::PointOf(st, 1);
  EXPECT_EQ(none.loss(), -1);
  EXPECT_EQ(none.samples_per_s(), -1);
}

TEST(RunHistoryTest, MemoryIsBoundedTheFileKeepsEveryPoint) {
  const std::string dir = ::testing::TempDir() + "/run";
  auto h = RunHistory::Open(dir);
  ASSERT_TRUE(h.ok()) << h.status();
  const int n = 3 * RunHistory::kMaxPoints;
  for (int c = 0; c < n; ++c) (*h)->Record(At(c, 1.0), c);
  const std::vector<RunPoint> points = (*h)->Points();
  EXPECT_LE(points.size(), RunHistory::kMaxPoints);
  EXPECT_EQ(points.front().clock(), 0);  // the whole span is kept
  EXPECT_EQ(points.back().clock(), n - 1);
  h->reset();
  std::ifstream in(dir + "/curves.jsonl");
  int lines = 0;
  for (std::string line; std::getline(in, line);) {
    ++lines;
    EXPECT_EQ(line.front(), '{');
  }
  EXPECT_EQ(lines, n);
  EXPECT_FALSE(RunHistory::Open("/proc/no/such/dir").ok());
}

}  // namespace
}  // namespace pstrain
