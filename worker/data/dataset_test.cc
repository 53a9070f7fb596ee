#include "worker/data/dataset.h"

#include <algorithm>
#include <set>

#include "common/job_spec.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(DatasetTest, EpochOrderIsAPermutationFixedBySeedAndEpoch) {
  const std::vector<int64_t> a = EpochOrder(1, 0, 1000);
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_EQ(a, EpochOrder(1, 0, 1000));
  EXPECT_NE(a, EpochOrder(1, 1, 1000));
  EXPECT_NE(a, EpochOrder(2, 0, 1000));
}

TEST(DatasetTest, EvenSlicesSplitTheBatchEvenlyInOrder) {
  for (int num_shares = 1; num_shares <= 7; ++num_shares) {
    int next = 0;
    for (int share_index = 0; share_index < num_shares; ++share_index) {
      const auto [begin, end] = EvenSlice(100, num_shares, share_index);
      EXPECT_EQ(begin, next);
      EXPECT_GE(end - begin, 100 / num_shares);
      EXPECT_LE(end - begin, 100 / num_shares + 1);
      next = end;
    }
    EXPECT_EQ(next, 100);
  }
}

TEST(DatasetTest, UnionOfWorkersBatchesDoesNotDependOnWorkerCount) {
  BatchSampler one(9, 1000, 60, 16);
  for (int64_t clock : {0, 5, 16, 33}) {
    const std::vector<int64_t> global = one.Indices(clock, 1, 0);
    ASSERT_EQ(global.size(), 60u);
    for (int num_shares : {2, 3, 4}) {
      BatchSampler s(9, 1000, 60, 16);
      std::vector<int64_t> joined;
      for (int share_index = 0; share_index < num_shares; ++share_index) {
        const std::vector<int64_t> part = s.Indices(clock, num_shares, share_index);
        joined.insert(joined.end(), part.begin(), part.end());
      }
      EXPECT_EQ(joined, global) << "clock " << clock << ", " << num_shares << " workers";
    }
  }
  // One epoch visits each example at most once.
  BatchSampler s(9, 1000, 60, 16);
  std::set<int64_t> seen;
  for (int64_t c = 0; c < 16; ++c) {
    for (int64_t i : s.Indices(c, 1, 0)) EXPECT_TRUE(seen.insert(i).second);
  }
}

TEST(DatasetTest, SyntheticIsSeededAndLearnable) {
  JobSpec job;
  job.mutable_data()->set_dataset(SYNTHETIC);
  ApplyJobDefaults(&job);
  const TrainTest a = MakeSynthetic(job.data(), 5);
  const TrainTest b = MakeSynthetic(job.data(), 5);
  EXPECT_EQ(a.train.size, 4096);
  EXPECT_EQ(a.train.dim, 32);
  EXPECT_EQ(a.train.features, b.train.features);
  EXPECT_EQ(a.test.labels, b.test.labels);
  EXPECT_NE(a.train.features, MakeSynthetic(job.data(), 6).train.features);
  for (int32_t l : a.train.labels) ASSERT_TRUE(l >= 0 && l < 4);
}

TEST(DatasetTest, MissingFashionMnistNamesThePath) {
  JobSpec job;
  job.mutable_data()->set_path("/nonexistent");
  ApplyJobDefaults(&job);
  absl::StatusOr<TrainTest> d = LoadDataset(job);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(d.status().message().find("/nonexistent/train-images-idx3-ubyte.gz"),
            absl::string_view::npos);
}

}  // namespace
}  // namespace pstrain

namespace pstrain {
namespace {

TEST(TextDataTest, BatchesDoNotDependOnTheNumberOfWorkers) {
  std::string text;
  for (int i = 0; i < 5000; ++i) text.push_back(static_cast<char>('a' + (i * 7) % 26));
  const int context = 16, batch = 6;
  Batch whole;
  TextBatch(text, context, 42, 3, batch, 1, 0, &whole);
  ASSERT_EQ(whole.rows, batch);
  std::vector<int32_t> tokens, labels;
  for (int share_index = 0; share_index < 4; ++share_index) {
    Batch part;
    TextBatch(text, context, 42, 3, batch, 4, share_index, &part);
    tokens.insert(tokens.end(), part.tokens.begin(), part.tokens.end());
    labels.insert(labels.end(), part.labels.begin(), part.labels.end());
  }
  EXPECT_EQ(tokens, whole.tokens);
  EXPECT_EQ(labels, whole.labels);
  // Labels are the next bytes; another clock draws other windows.
  for (int j = 0; j + 1 < context; ++j) EXPECT_EQ(whole.labels[j], whole.tokens[j + 1]);
  Batch other;
  TextBatch(text, context, 42, 4, batch, 1, 0, &other);
  EXPECT_NE(other.tokens, whole.tokens);
}

TEST(TextDataTest, WindowsAndEntropy) {
  const std::string text = "abcdefghij";  // 10 bytes: windows of 3 + 1
  EXPECT_EQ(TextWindows(text, 3), 3);
  Batch b;
  TextSlice(text, 3, 1, 2, &b);
  EXPECT_EQ(b.tokens, (std::vector<int32_t>{'d', 'e', 'f', 'g', 'h', 'i'}));
  EXPECT_EQ(b.labels, (std::vector<int32_t>{'e', 'f', 'g', 'h', 'i', 'j'}));
  EXPECT_NEAR(UnigramEntropy("aabb"), std::log(2.0), 1e-12);
  EXPECT_NEAR(UnigramEntropy("aaaa"), 0.0, 1e-12);
}

}  // namespace
}  // namespace pstrain
