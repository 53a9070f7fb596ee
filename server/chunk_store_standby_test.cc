// ChunkStore's standby copies in process: a primary's changes taken by
// its standby's copy bit for bit, a copy that cannot follow asking for
// the whole state, and a promoted copy training on as an undisturbed
// store would. The sender between them (server/standby_sender.h) is the
// test's hand.
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "common/job_spec.h"
#include "gtest/gtest.h"
#include "server/chunk_store.h"
#include "server/store_testing.h"

namespace pstrain {
namespace {

// What a store shipped, in order.
class Captured : public ChunkStore::ChunkSink {
 public:
  void Changed(int home, ChunkUpdate update) override { updates.push_back(std::move(update)); }
  void NeedWhole(int home, int32_t chunk) override { whole.push_back(chunk); }
  std::vector<ChunkUpdate> updates;
  std::vector<int32_t> whole;  // chunks whose whole state goes next
};

// Adam (state that must follow too), two workers, two servers: chunk 0
// (the weights) is server 0's, chunk 1 (the biases) server 1's.
JobSpec Job(Consistency mode, int standby_copies) {
  JobSpec job = SmallDenseJob(mode, 2);
  job.mutable_optimizer()->set_type(ADAM);
  job.mutable_optimizer()->set_learning_rate(0.01f);
  job.set_num_servers(2);
  job.set_standby_copies(standby_copies);
  return job;
}

std::vector<float> Gradient(int64_t clock, int worker, size_t n) {
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = 0.01f * ((clock * 7 + worker * 3 + i) % 11) - 0.05f;
  return g;
}

struct Cluster {
  explicit Cluster(Consistency mode)
      : job(Job(mode, 1)),
        partition(Partition::Make(ModelParams(job.model()), job.chunk_bytes(), 2).value()),
        primary(job, partition, 0, MakeOptimizer(job.optimizer()).value(), nullptr, nullptr),
        standby(job, partition, 1, MakeOptimizer(job.optimizer()).value(), nullptr, nullptr),
        alone_job(Job(mode, 0)),
        alone(alone_job, partition, 0, MakeOptimizer(alone_job.optimizer()).value(), nullptr,
              nullptr) {
    primary.SetChunkSink(&shipped);
    primary.standby().SetRoles({true, false}, {true, false});
    standby.standby().SetRoles({false, true}, {false, false});
  }
  // Both workers' pushes of `clock` to chunk 0 of `store` and of the store alone.
  void Push(ChunkStore& store, int64_t clock) {
    for (int w = 0; w < 2; ++w) {
      const std::vector<float> g = Gradient(clock, w, store.ChunkNumel(0));
      ASSERT_TRUE(store.Push(w, clock, 4, 0, g).ok());
      ASSERT_TRUE(alone.Push(w, clock, 4, 0, g).ok());
    }
  }
  // Hands the shipped changes to the standby as the sender would: whole
  // states for what it asks, confirmations back.
  void Deliver() {
    for (const ChunkUpdate& u : shipped.updates) {
      bool need_full = false;
      std::vector<float> g(u.grad().size() / sizeof(float));
      std::memcpy(g.data(), u.grad().data(), u.grad().size());
      ASSERT_TRUE(standby.Mirror(u, g, &need_full).ok());
      if (need_full) {
        const ChunkUpdate whole = primary.FullUpdate(u.chunk()).value();
        ASSERT_TRUE(standby.Mirror(whole, {}, &need_full).ok());
        ASSERT_FALSE(need_full);
        primary.Confirmed(u.chunk(), whole.version(),
                          {whole.applied().begin(), whole.applied().end()});
      } else {
        primary.Confirmed(u.chunk(), u.version(), {u.applied().begin(), u.applied().end()});
      }
    }
    shipped.updates.clear();
  }
  JobSpec job;
  Partition partition;
  Captured shipped;
  ChunkStore primary, standby;
  JobSpec alone_job;
  ChunkStore alone;  // the same pushes without standby copies: the undisturbed run
};

void ExpectSameState(const ChunkStore& a, const ChunkStore& b, int32_t chunk) {
  const std::vector<float> wa = ReadChunk(a, chunk), wb = ReadChunk(b, chunk);
  ASSERT_EQ(wa.size(), wb.size());
  EXPECT_EQ(std::memcmp(wa.data(), wb.data(), wa.size() * sizeof(float)), 0);
  ChunkState sa, sb;
  ASSERT_TRUE(a.ReadState(chunk, &sa).ok());
  ASSERT_TRUE(b.ReadState(chunk, &sb).ok());
  EXPECT_EQ(sa.steps(), sb.steps());
  ASSERT_EQ(sa.state_size(), sb.state_size());
  EXPECT_EQ(std::memcmp(sa.state().data(), sb.state().data(), sa.state_size() * sizeof(float)), 0);
}

TEST(ChunkStoreStandbyTest, APushIsReplicatedOnlyOnceTheStandbyHasItsRound) {
  Cluster c(BSP);
  c.Push(c.primary, 0);
  ASSERT_EQ(c.shipped.updates.size(), 1u);  // the round closed: one change
  EXPECT_FALSE(c.primary.Replicated(0, 0, 0));
  EXPECT_EQ(c.primary.standby().Lag(), 1);
  c.Deliver();
  EXPECT_TRUE(c.primary.Replicated(0, 0, 0));
  EXPECT_TRUE(c.primary.Replicated(0, 1, 0));
  EXPECT_FALSE(c.primary.Replicated(0, 0, 1));
  EXPECT_EQ(c.primary.standby().Lag(), 0);
}

TEST(ChunkStoreStandbyTest, AStandbyCopyFollowsItsPrimaryBitForBit) {
  for (Consistency mode : {BSP, SSP}) {
    Cluster c(mode);
    EXPECT_FALSE(c.standby.standby().Filled());  // a copy is filled by its primary
    for (int64_t clock = 0; clock < 6; ++clock) {
      c.Push(c.primary, clock);
      c.Deliver();
    }
    EXPECT_TRUE(c.standby.standby().Filled());
    ExpectSameState(c.primary, c.standby, 0);
    ExpectSameState(c.primary, c.alone, 0);
  }
}

TEST(ChunkStoreStandbyTest, AChangeThatDoesNotFollowTheCopyAsksForTheWholeState) {
  Cluster c(BSP);
  c.Push(c.primary, 0);
  c.Deliver();
  c.Push(c.primary, 1);
  c.Push(c.primary, 2);
  ASSERT_EQ(c.shipped.updates.size(), 2u);
  bool need_full = false;
  const ChunkUpdate& later = c.shipped.updates[1];  // version 3 on a copy of version 1
  ASSERT_TRUE(c.standby.Mirror(later, {}, &need_full).ok());
  EXPECT_TRUE(need_full);
  // The whole state brings the copy level, and the skipped change then
  // counts as held.
  const ChunkUpdate whole = c.primary.FullUpdate(0).value();
  ASSERT_TRUE(c.standby.Mirror(whole, {}, &need_full).ok());
  ExpectSameState(c.primary, c.standby, 0);
  ASSERT_TRUE(c.standby.Mirror(c.shipped.updates[0], {}, &need_full).ok());
  EXPECT_FALSE(need_full);
  ExpectSameState(c.primary, c.standby, 0);
}

TEST(ChunkStoreStandbyTest, AnOlderWholeStateThanTheCopyIsIgnored) {
  Cluster c(BSP);
  c.Push(c.primary, 0);
  c.Deliver();
  const ChunkUpdate old_state = c.primary.FullUpdate(0).value();
  for (int64_t clock = 1; clock < 3; ++clock) {
    c.Push(c.primary, clock);
    c.Deliver();
  }
  bool need_full = false;
  ASSERT_TRUE(c.standby.Mirror(old_state, {}, &need_full).ok());  // a late retry
  ExpectSameState(c.primary, c.standby, 0);
}

TEST(ChunkStoreStandbyTest, AChangeOutOfRangeIsRefused) {
  Cluster c(BSP);
  c.Push(c.primary, 0);
  ChunkUpdate u = c.shipped.updates.at(0);
  bool need_full = false;
  u.set_applied(0, -3);
  EXPECT_EQ(c.standby.Mirror(u, {}, &need_full).code(), absl::StatusCode::kInvalidArgument);
  u = c.shipped.updates.at(0);
  u.mutable_hyper()->set_type(SGD);  // another optimizer than the job's
  EXPECT_EQ(c.standby.Mirror(u, {}, &need_full).code(), absl::StatusCode::kInvalidArgument);
  u = c.shipped.updates.at(0);
  u.add_applied(1);  // a worker too many
  EXPECT_EQ(c.standby.Mirror(u, {}, &need_full).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChunkStoreStandbyTest, APromotedCopyTrainsOnAsTheUndisturbedStore) {
  Cluster c(BSP);
  for (int64_t clock = 0; clock < 3; ++clock) {
    c.Push(c.primary, clock);
    c.Deliver();
  }
  // Clock 3's round closes at the primary, which dies before shipping it.
  c.Push(c.primary, 3);
  c.shipped.updates.clear();
  // The standby is promoted (it serves both homes), the primary demoted.
  ASSERT_TRUE(c.standby.standby().SetRoles({true, true}, {false, false}));
  ASSERT_TRUE(c.primary.standby().SetRoles({false, false}, {false, false}));
  EXPECT_EQ(c.primary.CheckServed(0).code(), absl::StatusCode::kUnavailable);
  // What clock 3's pushes gave the demoted chunk never reached the new
  // primary: their answers must send them there, not acknowledge them.
  EXPECT_FALSE(c.primary.Replicated(0, 0, 3));
  EXPECT_TRUE(c.standby.CheckServed(0).ok());
  // The workers push clock 3 again (never acknowledged) and go on.
  for (int w = 0; w < 2; ++w) {
    const std::vector<float> g = Gradient(3, w, c.standby.ChunkNumel(0));
    ASSERT_TRUE(c.standby.Push(w, 3, 4, 0, g).ok());
  }
  // A push repeated for a clock the copy already has is taken and ignored.
  const std::vector<float> again = Gradient(2, 0, c.standby.ChunkNumel(0));
  ASSERT_TRUE(c.standby.Push(0, 2, 4, 0, again).ok());
  for (int64_t clock = 4; clock < 7; ++clock) c.Push(c.standby, clock);
  ExpectSameState(c.standby, c.alone, 0);
  EXPECT_TRUE(c.standby.Replicated(0, 0, 6));  // no standby left: nothing to wait for
}

TEST(ChunkStoreStandbyTest, APushOfTheClockAfterTheOneMissingIsRetriedNotRefused) {
  Cluster c(BSP);
  c.Push(c.primary, 0);
  const std::vector<float> g = Gradient(2, 0, c.primary.ChunkNumel(0));
  EXPECT_EQ(c.primary.Push(0, 2, 4, 0, g).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(c.primary.Push(0, 3, 4, 0, g).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.alone.Push(0, 2, 4, 0, g).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pstrain
