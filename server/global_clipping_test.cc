#include "server/global_clipping.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "server/store_testing.h"
#include "server/chunk_store.h"

namespace pstrain {
namespace {

// A store of `chunks` chunks whose held round is `round`; records the
// calls the protocol makes, the reducer's and the wake-ups included.
class FakeStore : public HeldRounds {
 public:
  explicit FakeStore(int chunks) : chunks_(chunks) {}
  std::vector<std::string> calls;
  HeldRound round;
  absl::Status memory;  // what SumHeldSquares and ApplyHeldRounds fail with
  Listener* listener = nullptr;

  bool holds_rounds() const override { return true; }
  int num_chunks() const override { return chunks_; }
  void SetRoundListener(Listener* l) override { listener = l; }
  absl::StatusOr<HeldRound> SumHeldSquares() const override {
    if (!memory.ok()) return memory;
    return round;
  }
  absl::Status ApplyHeldRounds(int64_t generation, float scale) override {
    calls.push_back(absl::StrCat("apply ", generation, " x", scale));
    return memory;
  }

 private:
  const int chunks_;
};

struct Fixture {
  explicit Fixture(int chunks, float clip_norm = 1.0f)
      : store(chunks),
        clipping(
            &store, clip_norm,
            [this](int64_t generation, int64_t clock,
                   double sum_squares) -> absl::StatusOr<double> {
              store.calls.push_back(
                  absl::StrCat("reduce ", generation, "@", clock, " ", sum_squares));
              if (!reduce_result.ok()) return reduce_result.status();
              return *reduce_result;
            },
            [this] { store.calls.push_back("wake pulls"); }) {}
  FakeStore store;
  absl::StatusOr<double> reduce_result = 0.0;  // the sum over every server
  GlobalClipping clipping;
};

// A round is taken once every chunk holds it, and only once.
TEST(GlobalClippingTest, ARoundIsTakenOnceEveryChunkHoldsIt) {
  Fixture f(3);
  f.clipping.RoundHeld();
  f.clipping.RoundHeld();
  EXPECT_FALSE(f.clipping.TakeRound());
  f.clipping.RoundHeld();
  EXPECT_TRUE(f.clipping.TakeRound());
  EXPECT_FALSE(f.clipping.TakeRound());  // counted again from 0
  EXPECT_TRUE(f.store.calls.empty());
}

// A restore empties the rounds: the chunks held before it do not count.
TEST(GlobalClippingTest, ARestoreDropsTheChunksHeldSoFar) {
  Fixture f(2);
  f.clipping.RoundHeld();
  f.clipping.RoundsDropped();
  f.clipping.RoundHeld();
  EXPECT_FALSE(f.clipping.TakeRound());
  f.clipping.RoundHeld();
  EXPECT_TRUE(f.clipping.TakeRound());
}

// The local sum goes out with the round's generation and clock; the norm
// over every server is sqrt(16) = 4 > clip_norm 2: the round is applied
// scaled by 2 / 4, then the pulls wake.
TEST(GlobalClippingTest, AboveTheBoundTheRoundIsScaledByClipOverTheGlobalNorm) {
  Fixture f(1, /*clip_norm=*/2.0f);
  f.store.round = HeldRound{3, 41, 9.0};
  f.reduce_result = 16.0;
  ASSERT_TRUE(f.clipping.ClipRound().ok());
  EXPECT_EQ(f.store.calls,
            (std::vector<std::string>{"reduce 3@41 9", "apply 3 x0.5", "wake pulls"}));
}

TEST(GlobalClippingTest, UnderTheBoundTheRoundIsAppliedUnscaled) {
  Fixture f(1, /*clip_norm=*/5.0f);
  f.store.round = HeldRound{0, 7, 1.0};
  f.reduce_result = 9.0;  // norm 3
  ASSERT_TRUE(f.clipping.ClipRound().ok());
  EXPECT_EQ(f.store.calls, (std::vector<std::string>{"reduce 0@7 1", "apply 0 x1", "wake pulls"}));
}

// A round the scheduler cannot reduce (the cluster rolled back, the job
// ended) stays held: nothing applied, nobody woken, not the server's error.
TEST(GlobalClippingTest, AFailedReductionLeavesTheRoundHeld) {
  Fixture f(1);
  f.store.round = HeldRound{1, 5, 2.0};
  f.reduce_result = absl::FailedPreconditionError("the cluster rolled back");
  ASSERT_TRUE(f.clipping.ClipRound().ok());
  EXPECT_EQ(f.store.calls, (std::vector<std::string>{"reduce 1@5 2"}));
}

// The store's memory failing (offloading) ends the protocol with its error.
TEST(GlobalClippingTest, AStoreErrorIsTheRoundsError) {
  Fixture f(1);
  f.store.memory = absl::DataLossError("slab file: short read");
  EXPECT_EQ(f.clipping.ClipRound().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(f.store.calls.empty());
}

struct StoreFixture {
  explicit StoreFixture(float clip_norm)
      : job(SmallDenseJob(BSP, 2, clip_norm)),
        partition(Partition::Make(ModelParams(job.model()), job.chunk_bytes(), 1).value()),
        store(job, partition, 0, MakeOptimizer(job.optimizer()).value(), nullptr, nullptr) {}
  // Worker `w`'s push of `clock`: gradient 1 everywhere, 4 samples.
  void PushOnes(int w, int64_t clock) {
    for (int32_t chunk : store.chunk_ids()) {
      ASSERT_TRUE(
          store.Push(w, clock, 4, chunk, std::vector<float>(store.ChunkNumel(chunk), 1.0f)).ok());
    }
  }
  JobSpec job;
  Partition partition;
  ChunkStore store;
};

TEST(GlobalClippingTest, NothingStartsWithoutHeldRounds) {
  StoreFixture f(/*clip_norm=*/0);
  EXPECT_FALSE(f.store.holds_rounds());
  EXPECT_EQ(GlobalClipping::Start(&f.store, 1.0f, nullptr, nullptr), nullptr);
}

// The store and the protocol together, on the calling thread: the round's
// mean (1 in each of 10 elements: sum of squares 10) waits unapplied, the
// other servers add 6, the norm is sqrt(16) = 4 and clip_norm 1 scales the
// mean by 1/4: w = w0 - 0.5 * 0.25.
TEST(GlobalClippingTest, AChunkStoresHeldRoundIsAppliedScaledByTheGlobalNorm) {
  StoreFixture f(/*clip_norm=*/1.0f);
  ASSERT_TRUE(f.store.holds_rounds());
  ASSERT_EQ(f.store.num_chunks(), 2);
  std::vector<std::string> calls;
  GlobalClipping clipping(
      &f.store, 1.0f,
      [&](int64_t generation, int64_t clock, double sum_squares) -> absl::StatusOr<double> {
        calls.push_back(absl::StrCat("reduce ", generation, "@", clock, " ", sum_squares));
        return sum_squares + 6.0;
      },
      [&] { calls.push_back("wake pulls"); });
  f.store.SetRoundListener(&clipping);
  const std::vector<float> w0 = ReadChunk(f.store, 0);
  f.PushOnes(0, 0);
  EXPECT_FALSE(clipping.TakeRound());  // worker 1 has not pushed
  f.PushOnes(1, 0);
  EXPECT_FALSE(f.store.Readable(0, 1));  // held, not applied
  EXPECT_EQ(ReadChunk(f.store, 0), w0);
  ASSERT_TRUE(clipping.TakeRound());
  ASSERT_TRUE(clipping.ClipRound().ok());
  EXPECT_EQ(calls, (std::vector<std::string>{"reduce 0@0 10", "wake pulls"}));
  EXPECT_TRUE(f.store.Readable(0, 1));
  EXPECT_TRUE(f.store.Readable(1, 1));
  const std::vector<float> w1 = ReadChunk(f.store, 0);
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(w1[i], w0[i] - 0.5f * 0.25f);
}

// A rollback empties the held rounds: the protocol counts from 0 again,
// and the next round is of the new generation.
TEST(GlobalClippingTest, AStoreRestoreDropsItsHeldRounds) {
  StoreFixture f(/*clip_norm=*/1.0f);
  GlobalClipping clipping(
      &f.store, 1.0f, [](int64_t, int64_t, double s) -> absl::StatusOr<double> { return s; },
      [] {});
  f.store.SetRoundListener(&clipping);
  f.PushOnes(0, 0);
  f.PushOnes(1, 0);
  ASSERT_TRUE(f.store.Restore(1, 0, nullptr).ok());
  EXPECT_FALSE(clipping.TakeRound());
  for (int w : {0, 1}) {
    for (int32_t chunk : f.store.chunk_ids()) {
      ASSERT_TRUE(
          f.store.Push(w, 0, 4, chunk, std::vector<float>(f.store.ChunkNumel(chunk), 1.0f), 0, 1)
              .ok());
    }
  }
  ASSERT_TRUE(clipping.TakeRound());
  const absl::StatusOr<HeldRound> round = f.store.SumHeldSquares();
  ASSERT_TRUE(round.ok());
  EXPECT_EQ(round->generation, 1);
  EXPECT_EQ(round->clock, 0);
  EXPECT_EQ(round->sum_squares, 10.0);
}

// The held rounds of a store whose chunks are summed and applied over a
// pool of threads: the same sums of squares and the same weights, to the
// bit, as in order on the caller, for Adam over several clipped rounds.
TEST(GlobalClippingTest, ChunksOverThreadsGiveTheSameBitsAsInOrder) {
  JobSpec job = SmallDenseJob(BSP, 2, /*clip_norm=*/0.5f);
  job.mutable_model()->mutable_layers(0)->set_units(300);
  job.mutable_optimizer()->set_type(ADAM);
  job.mutable_optimizer()->set_learning_rate(0.01f);
  job.set_chunk_bytes(256);  // 64 values a chunk: 20 chunks
  const Partition partition =
      Partition::Make(ModelParams(job.model()), job.chunk_bytes(), 1).value();
  ThreadPool pool(4);
  ChunkStore in_order(job, partition, 0, MakeOptimizer(job.optimizer()).value(), nullptr,
                      nullptr);
  ChunkStore threaded(job, partition, 0, MakeOptimizer(job.optimizer()).value(), &pool, nullptr);
  ASSERT_GE(threaded.chunk_ids().size(), 16u);
  for (int64_t clock = 0; clock < 5; ++clock) {
    for (int w = 0; w < 2; ++w) {
      for (int32_t chunk : threaded.chunk_ids()) {
        std::vector<float> g(threaded.ChunkNumel(chunk));
        for (size_t i = 0; i < g.size(); ++i) g[i] = std::sin(clock * 7.0f + w + chunk * 3.0f + i);
        ASSERT_TRUE(in_order.Push(w, clock, 4, chunk, g).ok());
        ASSERT_TRUE(threaded.Push(w, clock, 4, chunk, g).ok());
      }
    }
    const absl::StatusOr<HeldRound> a = in_order.SumHeldSquares(), b = threaded.SumHeldSquares();
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_GT(a->sum_squares, 1.0);
    EXPECT_EQ(a->sum_squares, b->sum_squares);
    EXPECT_EQ(b->clock, clock);
    const float scale = static_cast<float>(0.5 / std::sqrt(a->sum_squares));
    ASSERT_TRUE(in_order.ApplyHeldRounds(0, scale).ok());
    ASSERT_TRUE(threaded.ApplyHeldRounds(0, scale).ok());
  }
  for (int32_t chunk : threaded.chunk_ids()) {
    const std::vector<float> a = ReadChunk(in_order, chunk), b = ReadChunk(threaded, chunk);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << chunk;
    EXPECT_TRUE(threaded.Readable(chunk, 5)) << chunk;
  }
}

}  // namespace
}  // namespace pstrain
