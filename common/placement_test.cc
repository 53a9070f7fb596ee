#include "common/placement.h"

#include <map>
#include <set>

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

// Each listed server's bytes of chunks (4 an element).
std::map<int, int64_t> Bytes(const Placement& p, const Partition& partition) {
  std::map<int, int64_t> bytes;
  for (int s : p.servers()) bytes[s] = 0;
  for (int c = 0; c < p.chunk_server_size(); ++c) {
    bytes[p.chunk_server(c)] += partition.chunks()[c].numel * 4;
  }
  return bytes;
}

std::map<int, int> Buckets(const Placement& p) {
  std::map<int, int> n;
  for (int s : p.bucket_server()) ++n[s];
  return n;
}

// What differs between `before` and `after` is exactly `moves`, each from
// its owner before to its owner after.
void ExpectTheMovesAreTheDifference(const Placement& before, const PlacementChange& change) {
  std::set<int> moved_chunks, moved_buckets;
  for (const PlacementMove& m : change.moves) {
    const bool chunk = m.kind == PlacementMove::Kind::kChunk;
    (chunk ? moved_chunks : moved_buckets).insert(m.id);
    EXPECT_EQ(chunk ? before.chunk_server(m.id) : before.bucket_server(m.id), m.from);
    EXPECT_EQ(chunk ? change.after.chunk_server(m.id) : change.after.bucket_server(m.id), m.to);
  }
  for (int c = 0; c < before.chunk_server_size(); ++c) {
    if (!moved_chunks.count(c)) {
      EXPECT_EQ(before.chunk_server(c), change.after.chunk_server(c));
    }
  }
  for (int b = 0; b < kRowBuckets; ++b) {
    if (!moved_buckets.count(b)) {
      EXPECT_EQ(before.bucket_server(b), change.after.bucket_server(b));
    }
  }
}

TEST(PlacementTest, TheInitialPlacementIsThePartitions) {
  const Partition partition = Partition::Make(Params({1000, 7, 300}), 400, 3).value();
  const Placement p = InitialPlacement(partition);
  EXPECT_EQ(p.version(), 1);
  EXPECT_EQ(std::vector<int>(p.servers().begin(), p.servers().end()), (std::vector<int>{0, 1, 2}));
  for (const ChunkInfo& c : partition.chunks()) EXPECT_EQ(ServerOfChunk(p, c.id), c.server);
  for (int s = 0; s < 3; ++s) EXPECT_EQ(ChunksOn(p, s), partition.ServerChunks(s));
  EXPECT_EQ(p.bucket_server(7), 7 % 3);
  EXPECT_TRUE(CheckPlacement(p, static_cast<int>(partition.chunks().size())).ok());
}

TEST(PlacementTest, RowsSpreadOverBucketsAndServers) {
  const Partition partition = Partition::Make(Params({10}), 400, 3).value();
  const Placement p = InitialPlacement(partition);
  std::vector<int> per_bucket(kRowBuckets, 0), per_server(3, 0);
  for (uint64_t id = 0; id < 102400; ++id) {
    ++per_bucket[RowBucket(id)];
    ++per_server[ServerOfRow(p, id)];
  }
  for (int n : per_bucket) EXPECT_NEAR(n, 100, 50);
  for (int n : per_server) EXPECT_NEAR(n, 102400 / 3, 1500);
}

TEST(PlacementTest, AnAddedServerTakesItsShareAndNothingElseMoves) {
  const Partition partition = Partition::Make(Params({2000}), 400, 2).value();  // 20 chunks
  const Placement now = InitialPlacement(partition);
  const PlacementChange change = PlanAdd(now, partition, 2, PlacementLimits()).value();
  EXPECT_EQ(change.after.version(), 2);
  ASSERT_TRUE(CheckPlacement(change.after, 20).ok());
  ExpectTheMovesAreTheDifference(now, change);
  for (const PlacementMove& m : change.moves) EXPECT_EQ(m.to, 2);
  for (const auto& [s, b] : Bytes(change.after, partition)) EXPECT_NEAR(b, 8000 / 3, 400) << s;
  EXPECT_EQ(change.MovedBytes(), 6 * 400);  // 20 chunks over 3: 7, 7, 6
  for (const auto& [s, n] : Buckets(change.after)) EXPECT_NEAR(n, kRowBuckets / 3, 1) << s;
}

TEST(PlacementTest, AnAddedServerBalancesChunksOfManySizes) {
  const Partition partition = Partition::Make(Params({1000, 7, 300, 90, 2500, 40}), 400, 2).value();
  const Placement now = InitialPlacement(partition);
  const PlacementChange change = PlanAdd(now, partition, 2, PlacementLimits()).value();
  ExpectTheMovesAreTheDifference(now, change);
  const std::map<int, int64_t> after = Bytes(change.after, partition);
  const int64_t total = (1000 + 7 + 300 + 90 + 2500 + 40) * 4;
  for (const auto& [s, b] : after) EXPECT_NEAR(b, total / 3, 400) << s;  // a chunk of 400
  // Every move took from a server above the share to the one below it.
  EXPECT_LE(change.MovedBytes(), total / 3 + 400);
}

TEST(PlacementTest, ADrainedServersChunksAndBucketsGoToTheOthers) {
  const Partition partition = Partition::Make(Params({1000, 7, 300, 2500}), 400, 3).value();
  const Placement now = InitialPlacement(partition);
  const PlacementChange change = PlanDrain(now, partition, 1, PlacementLimits()).value();
  ASSERT_TRUE(CheckPlacement(change.after, static_cast<int>(partition.chunks().size())).ok());
  EXPECT_EQ(std::vector<int>(change.after.servers().begin(), change.after.servers().end()),
            (std::vector<int>{0, 2}));
  ExpectTheMovesAreTheDifference(now, change);
  for (const PlacementMove& m : change.moves) EXPECT_EQ(m.from, 1);
  EXPECT_EQ(change.MovedBytes(), partition.ServerBytes(1));
  const std::map<int, int64_t> after = Bytes(change.after, partition);
  EXPECT_LE(std::abs(after.at(0) - after.at(2)), 400);
  EXPECT_EQ(Buckets(change.after).count(1), 0u);
  EXPECT_NEAR(Buckets(change.after).at(0), kRowBuckets / 2, 1);
}

TEST(PlacementTest, ADrainedIdIsFreeForTheNextServerAdded) {
  const Partition partition = Partition::Make(Params({2000}), 400, 3).value();
  const Placement drained = PlanDrain(InitialPlacement(partition), partition, 1, {}).value().after;
  EXPECT_EQ(FreeServerId(drained), 1);
  const PlacementChange added = PlanAdd(drained, partition, 1, PlacementLimits()).value();
  EXPECT_EQ(added.after.version(), 3);
  EXPECT_EQ(std::vector<int>(added.after.servers().begin(), added.after.servers().end()),
            (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(FreeServerId(added.after), 3);
}

TEST(PlacementTest, APartitionIsPlacedAsItsPlacementSays) {
  const std::vector<ParamInfo> params = Params({1000, 7, 300});
  const Partition made = Partition::Make(params, 400, 2).value();
  const Placement initial = InitialPlacement(made);
  const Partition same = PlacedPartition(params, 400, 2, initial).value();
  for (const ChunkInfo& c : made.chunks()) EXPECT_EQ(same.chunks()[c.id].server, c.server);
  for (uint64_t id = 0; id < 5000; ++id) EXPECT_EQ(ServerOfRow(id, 2), ServerOfRow(initial, id));

  const Placement grown = PlanAdd(initial, made, 2, {}).value().after;
  const Partition placed = PlacedPartition(params, 400, 2, grown).value();
  EXPECT_EQ(placed.num_servers(), 3);
  for (int s = 0; s < 3; ++s) EXPECT_EQ(placed.ServerChunks(s), ChunksOn(grown, s));
  const Placement drained = PlanDrain(grown, placed, 0, {}).value().after;
  const Partition without = PlacedPartition(params, 400, 2, drained).value();
  EXPECT_EQ(without.num_servers(), 3);
  EXPECT_TRUE(without.ServerChunks(0).empty());
  Placement bad = grown;
  bad.set_chunk_server(0, 7);
  EXPECT_EQ(PlacedPartition(params, 400, 2, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PlacementTest, ChangesThatCannotBeAreRefusedWithTheReason) {
  const Partition partition = Partition::Make(Params({2000}), 400, 1).value();
  const Placement one = InitialPlacement(partition);
  absl::Status st = PlanDrain(one, partition, 0, {}).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("last server"), absl::string_view::npos) << st;
  EXPECT_EQ(PlanDrain(one, partition, 4, {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(PlanAdd(one, partition, 0, {}).status().code(), absl::StatusCode::kFailedPrecondition);
  const Placement two = PlanAdd(one, partition, 1, {}).value().after;
  PlacementLimits tight;
  tight.budget[0] = 5000;  // holds 4000 of 8000; the drain would give it all
  st = PlanDrain(two, partition, 1, tight).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("budget"), absl::string_view::npos) << st;
  EXPECT_TRUE(PlanDrain(two, partition, 1, {}).ok());
}

TEST(PlacementTest, AMalformedPlacementIsInvalid) {
  const Partition partition = Partition::Make(Params({2000}), 400, 2).value();
  const Placement good = InitialPlacement(partition);
  Placement p = good;
  p.set_chunk_server(3, 5);
  EXPECT_EQ(CheckPlacement(p, 5).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanAdd(p, partition, 2, {}).status().code(), absl::StatusCode::kInvalidArgument);
  p = good;
  p.add_bucket_server(0);
  EXPECT_EQ(CheckPlacement(p, 5).code(), absl::StatusCode::kInvalidArgument);
  p = good;
  p.set_servers(0, 1);
  EXPECT_EQ(CheckPlacement(p, 5).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckPlacement(good, 6).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckPlacement(Placement(), 0).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pstrain
