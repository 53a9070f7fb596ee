#include "common/partition.h"

#include <cmath>
#include <numeric>

#include "common/job_spec.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

std::vector<ParamInfo> Params(std::vector<int64_t> sizes) {
  std::vector<ParamInfo> out;
  for (size_t i = 0; i < sizes.size(); ++i) {
    ParamInfo p;
    p.name = "p" + std::to_string(i);
    p.numel = sizes[i];
    p.shape = {sizes[i]};
    out.push_back(p);
  }
  return out;
}

TEST(PartitionTest, ChunksCoverEveryElementOnce) {
  const auto params = Params({1000, 7, 300});
  Partition p = Partition::Make(params, 400, 3).value();  // 100 floats per chunk
  ASSERT_EQ(p.chunks().size(), 10u + 1u + 3u);
  for (size_t i = 0; i < params.size(); ++i) {
    int64_t next = 0;
    for (int32_t id : p.ParamChunks(i)) {
      const ChunkInfo& c = p.chunks()[id];
      EXPECT_EQ(c.param, static_cast<int>(i));
      EXPECT_EQ(c.offset, next);
      EXPECT_LE(c.numel, 100);
      next += c.numel;
    }
    EXPECT_EQ(next, params[i].numel);
  }
  int64_t total = 0;
  for (int s = 0; s < 3; ++s) {
    for (int32_t id : p.ServerChunks(s)) EXPECT_EQ(p.chunks()[id].server, s);
    total += p.ServerBytes(s);
  }
  EXPECT_EQ(total, (1000 + 7 + 300) * 4);
}

// A matrix whose rows fit in a chunk is cut at row boundaries; one whose
// rows do not is cut by size.
TEST(PartitionTest, MatricesAreCutAtRows) {
  std::vector<ParamInfo> params(2);
  params[0].name = "m";
  params[0].shape = {10, 30};
  params[0].numel = 300;
  params[1].name = "wide";
  params[1].shape = {2, 150};
  params[1].numel = 300;
  Partition p = Partition::Make(params, 400, 1).value();  // 100 floats per chunk
  auto numels = [&](int param) {
    std::vector<int64_t> out;
    for (int32_t id : p.ParamChunks(param)) out.push_back(p.chunks()[id].numel);
    return out;
  };
  EXPECT_EQ(numels(0), (std::vector<int64_t>{90, 90, 90, 30}));  // three rows a chunk
  EXPECT_EQ(numels(1), (std::vector<int64_t>{100, 100, 100}));
}

TEST(PartitionTest, GreedyBalancesBytes) {
  // Greedy by size, worked by hand: thirteen 100-value chunks go round-robin
  // (ties to the lowest id), the 7-value chunk to the lightest server.
  Partition p = Partition::Make(Params({1000, 7, 300}), 400, 3).value();
  EXPECT_EQ(p.ServerBytes(0), 500 * 4);
  EXPECT_EQ(p.ServerBytes(1), 407 * 4);
  EXPECT_EQ(p.ServerBytes(2), 400 * 4);
}

TEST(PartitionTest, SameMapEveryTime) {
  JobSpec job;
  ApplyJobDefaults(&job);
  const auto params = ModelParams(job.model());
  Partition a = Partition::Make(params, 65536, 4).value();
  Partition b = Partition::Make(params, 65536, 4).value();
  ASSERT_EQ(a.chunks().size(), b.chunks().size());
  for (size_t i = 0; i < a.chunks().size(); ++i)
    EXPECT_EQ(a.chunks()[i].server, b.chunks()[i].server);
}

TEST(PartitionTest, BadArguments) {
  EXPECT_FALSE(Partition::Make(Params({10}), 400, 0).ok());
  EXPECT_FALSE(Partition::Make(Params({10}), 2, 1).ok());
}

TEST(ParamsTest, InitDependsOnSeedNameAndIndexOnly) {
  JobSpec job;
  ApplyJobDefaults(&job);
  const auto params = ModelParams(job.model());
  ASSERT_EQ(params.size(), 6u);
  EXPECT_EQ(params[0].name, "dense0/weight");
  EXPECT_EQ(params[0].shape, (std::vector<int64_t>{784, 256}));
  EXPECT_EQ(params[1].name, "dense0/bias");
  const double limit = std::sqrt(6.0 / (784 + 256));
  double sum = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    const float v = InitialValue(42, params[0], i);
    EXPECT_LE(std::abs(v), limit);
    EXPECT_EQ(v, InitialValue(42, params[0], i));
    sum += v;
  }
  EXPECT_LT(std::abs(sum / 1000), limit / 10);  // centred
  EXPECT_NE(InitialValue(42, params[0], 0), InitialValue(43, params[0], 0));
  EXPECT_EQ(InitialValue(42, params[1], 3), 0.0f);
}

}  // namespace
}  // namespace pstrain
