// A server's shard placed by a placement (server/placed_shard.h): made now
// it holds the placement's chunks from the seed; made ahead of a move's
// switch it is the move's placement's, taken once by its version, and a
// move dropped or replaced drops it.
#include "server/placed_shard.h"

#include <algorithm>
#include <vector>

#include "common/params.h"
#include "common/placement.h"
#include "gtest/gtest.h"
#include "server/store_testing.h"

namespace pstrain {
namespace {

// A small dense job over 2 servers; server 0's inputs.
struct Fixture {
  Fixture() : job(TwoServerJob()) {
    partition = Partition::Make(ModelParams(job.model()), job.chunk_bytes(), 2).value();
  }
  static JobSpec TwoServerJob() {
    JobSpec j = SmallDenseJob(BSP, 1);
    j.set_num_servers(2);
    return j;
  }
  JobSpec job;
  Partition partition;
  ThreadPool pool{1};
  ShardInputs Inputs() {
    ShardInputs in;
    in.job = &job;
    in.server_id = 0;
    in.pool = &pool;
    return in;
  }
};

// Every chunk and bucket on server 0 (a drain of server 1), as version `v`.
Placement AllOnZero(const Placement& from, int64_t v) {
  Placement to = from;
  to.set_version(v);
  to.clear_servers();
  to.add_servers(0);
  for (int& s : *to.mutable_chunk_server()) s = 0;
  for (int& s : *to.mutable_bucket_server()) s = 0;
  return to;
}

std::vector<int32_t> Sorted(std::vector<int32_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(PlacedShardTest, AShardPlacedNowHoldsItsPlacementsChunksFromTheSeed) {
  Fixture f;
  const Placement initial = InitialPlacement(f.partition);
  absl::StatusOr<PlacedShard> placed =
      PlaceShard(f.Inputs(), initial, ChunkStore::StartValues::kSeed);
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_EQ(Sorted(placed->store->chunk_ids()), Sorted(ChunksOn(initial, 0)));
  EXPECT_EQ(placed->shard->store(), placed->store);
  EXPECT_FALSE(placed->plan.has_value());  // in memory
  EXPECT_EQ(ReadChunk(*placed->store, 0).size(), 8u);
}

TEST(PlacedShardTest, AShardMadeAheadIsTakenOnceByItsVersion) {
  Fixture f;
  const Placement initial = InitialPlacement(f.partition);
  const Placement to = AllOnZero(initial, 2);
  ShardAhead ahead(f.Inputs());
  ahead.Start(initial, to);
  ahead.Start(initial, to);  // the same: still the one
  EXPECT_FALSE(ahead.Take(3).has_value());
  std::optional<PlacedShard> made = ahead.Take(2);
  ASSERT_TRUE(made.has_value());
  EXPECT_EQ(made->placement.version(), 2);
  EXPECT_EQ(Sorted(made->store->chunk_ids()), Sorted(ChunksOn(to, 0)));
  EXPECT_GT(made->store->chunk_ids().size(), ChunksOn(initial, 0).size());
  EXPECT_FALSE(ahead.Take(2).has_value());  // taken
}

TEST(PlacedShardTest, AMoveDroppedOrReplacedDropsTheShardMadeAhead) {
  Fixture f;
  const Placement initial = InitialPlacement(f.partition);
  ShardAhead ahead(f.Inputs());
  ahead.Start(initial, AllOnZero(initial, 2));
  ahead.Start(initial, Placement());  // no move
  EXPECT_FALSE(ahead.Take(2).has_value());
  ahead.Start(initial, AllOnZero(initial, 2));
  ahead.Start(initial, AllOnZero(initial, 3));  // another move
  EXPECT_FALSE(ahead.Take(2).has_value());
  EXPECT_TRUE(ahead.Take(3).has_value());
}

TEST(PlacedShardTest, AJobItsPartitionCannotTakeIsInvalid) {
  Fixture f;
  f.job.set_chunk_bytes(0);
  EXPECT_EQ(PlaceShard(f.Inputs(), InitialPlacement(f.partition), ChunkStore::StartValues::kSeed)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pstrain
