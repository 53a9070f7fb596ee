#include "server/chunk_store.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "common/job_spec.h"
#include "gtest/gtest.h"
#include "server/store_testing.h"

namespace pstrain {
namespace {

struct Fixture {
  explicit Fixture(Consistency mode, int workers = 2, int servers = 1, float clip_norm = 0)
      : job(SmallDenseJob(mode, workers, clip_norm)),
        partition(Partition::Make(ModelParams(job.model()), job.chunk_bytes(), servers).value()),
        store(job, partition, 0, MakeOptimizer(job.optimizer()).value(), nullptr, nullptr) {}
  JobSpec job;
  Partition partition;
  ChunkStore store;
};

// Adam under BSP and ASP, a store offloaded with room for 2 of its chunks
// (its file read and written with O_DIRECT where the file system allows
// it, and through the page cache) against one in memory: the same pushes
// give bit-identical weights, and no more than the budget is ever resident.
TEST(ChunkStoreTest, AnOffloadedStoreTrainsBitIdenticallyWithinItsBudget) {
  for (const auto& [mode, direct] : std::vector<std::pair<Consistency, bool>>{
           {BSP, true}, {ASP, true}, {BSP, false}}) {
    JobSpec job = SmallDenseJob(mode, 2);
    LayerSpec* wide = job.mutable_model()->mutable_layers(0);
    wide->set_units(64);
    job.mutable_optimizer()->set_type(ADAM);
    job.mutable_optimizer()->set_learning_rate(0.01f);
    job.set_chunk_bytes(256);  // 64 values a chunk: 5 chunks
    const Partition partition =
        Partition::Make(ModelParams(job.model()), job.chunk_bytes(), 1).value();
    char dir[] = "/tmp/offload_store_XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    ChunkStore memory(job, partition, 0, MakeOptimizer(job.optimizer()).value(), nullptr, nullptr);
    const int64_t budget = 2 * 4096;  // each chunk's slab fits one page
    ChunkStore offloaded(job, partition, 0, MakeOptimizer(job.optimizer()).value(), nullptr,
                         nullptr, OffloadOptions{dir, budget, 0, direct});
    ASSERT_TRUE(offloaded.health().ok()) << offloaded.health();
    ASSERT_GE(offloaded.chunk_ids().size(), 4u);
    for (int64_t clock = 0; clock < 6; ++clock) {
      for (int w = 0; w < 2; ++w) {
        for (int32_t chunk : offloaded.chunk_ids()) {
          std::vector<float> g(offloaded.ChunkNumel(chunk));
          for (size_t i = 0; i < g.size(); ++i) g[i] = std::sin(clock * 7.0f + w + chunk + i);
          ASSERT_TRUE(memory.Push(w, clock, 4, chunk, g).ok());
          ASSERT_TRUE(offloaded.Push(w, clock, 4, chunk, g).ok());
          EXPECT_LE(offloaded.memory_stats().resident_bytes, budget);
        }
      }
    }
    for (int32_t chunk : offloaded.chunk_ids()) {
      const std::vector<float> a = ReadChunk(memory, chunk), b = ReadChunk(offloaded, chunk);
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << chunk;
    }
    const ChunkMemoryStats st = offloaded.memory_stats();
    EXPECT_TRUE(st.offloaded);
    if (!direct) {
      EXPECT_FALSE(st.direct);
    }
    std::printf("offloaded to %s, O_DIRECT %s\n", dir, st.direct ? "on" : "off");
    EXPECT_GT(st.read_bytes, 0);
    EXPECT_GT(st.write_bytes, 0);
  }
}

TEST(ChunkStoreTest, BspAppliesOneStepOverTheRoundsMean) {
  Fixture f(BSP);
  // chunk 0: dense0/weight (8 values), chunk 1: dense0/bias (2 values)
  const std::vector<float> w0 = ReadChunk(f.store, 0);
  ASSERT_EQ(w0.size(), 8u);
  std::vector<float> g_a(8, 1.0f), g_b(8, 4.0f);
  ASSERT_TRUE(f.store.Push(0, 0, 2, 0, g_a).ok());
  // Half a round: nothing applied, the read guarantee for clock 1 not met.
  EXPECT_EQ(ReadChunk(f.store, 0), w0);
  EXPECT_FALSE(f.store.Readable(0, 1));
  ASSERT_TRUE(f.store.Push(1, 0, 6, 0, g_b).ok());
  EXPECT_TRUE(f.store.Readable(0, 1));
  // mean over 8 samples = (2 * 1 + 6 * 4) / 8 = 3.25; w = w0 - 0.5 * 3.25
  const std::vector<float> w1 = ReadChunk(f.store, 0);
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(w1[i], w0[i] - 0.5f * 3.25f);
}

TEST(ChunkStoreTest, BspRoundsCloseOverTheLiveWorkersAfterOneDies) {
  Fixture f(BSP);
  const std::vector<float> w0 = ReadChunk(f.store, 0);
  std::vector<float> g(8, 1.0f);
  ASSERT_TRUE(f.store.Push(0, 0, 4, 0, g).ok());
  EXPECT_FALSE(f.store.Readable(0, 1));  // waiting for worker 1
  f.store.RemoveWorker(1);
  EXPECT_TRUE(f.store.Readable(0, 1));  // the round closed over worker 0
  const std::vector<float> w1 = ReadChunk(f.store, 0);
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(w1[i], w0[i] - 0.5f);
  // Chunk 1 had no push yet: it waits for worker 0 alone.
  EXPECT_FALSE(f.store.Readable(1, 1));
  ASSERT_TRUE(f.store.Push(0, 0, 4, 1, std::vector<float>{1.0f, 1.0f}).ok());
  EXPECT_TRUE(f.store.Readable(1, 1));
  // The dead worker's pushes are refused; the next rounds need worker 0 only.
  EXPECT_EQ(f.store.Push(1, 0, 4, 0, g).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(f.store.Push(0, 1, 4, 0, g).ok());
  EXPECT_TRUE(f.store.Readable(0, 2));
  EXPECT_EQ(f.store.MinAppliedClock(), 1);  // chunk 1 is at 1
  f.store.RemoveWorker(1);                  // idempotent
}

// Two stages x two replicas: worker w trains stage w % 2. A chunk's BSP
// round closes once its own stage's workers pushed; other stages' workers
// may not push it.
TEST(ChunkStoreTest, UnderPipelineStagesEachChunkWaitsForItsOwnStageOnly) {
  JobSpec job = SmallDenseJob(BSP, 4);
  LayerSpec* relu = job.mutable_model()->mutable_layers()->Add();
  *relu = job.model().layers(1);  // SOFTMAX_XENT moves to the end
  job.mutable_model()->mutable_layers(1)->set_type(DENSE);
  job.mutable_model()->mutable_layers(1)->set_units(2);
  job.mutable_model()->mutable_layers(1)->set_name("dense1");
  job.set_pipeline_stages(2);
  ASSERT_TRUE(ValidateJobSpec(job).ok()) << ValidateJobSpec(job);
  const Partition partition =
      Partition::Make(ModelParams(job.model()), job.chunk_bytes(), 1).value();
  ChunkStore store(job, partition, 0, MakeOptimizer(job.optimizer()).value(), nullptr, nullptr);
  // chunks 0, 1: dense0 (stage 0); chunks 2, 3: dense1 (stage 1).
  const std::vector<float> w0 = ReadChunk(store, 0);
  std::vector<float> g(w0.size(), 1.0f);
  ASSERT_TRUE(store.Push(0, 0, 4, 0, g).ok());
  EXPECT_FALSE(store.Readable(0, 1));  // replica 1's stage 0 (worker 2) still to come
  const absl::Status wrong = store.Push(1, 0, 4, 0, g);
  EXPECT_EQ(wrong.code(), absl::StatusCode::kInvalidArgument) << wrong;
  ASSERT_TRUE(store.Push(2, 0, 4, 0, g).ok());
  EXPECT_TRUE(store.Readable(0, 1));  // no stage-1 worker was waited for
  // Stage 1's chunks wait for workers 1 and 3.
  std::vector<float> g1(ReadChunk(store, 2).size(), 1.0f);
  ASSERT_TRUE(store.Push(1, 0, 4, 2, g1).ok());
  EXPECT_FALSE(store.Readable(2, 1));
  store.RemoveWorker(3);
  EXPECT_TRUE(store.Readable(2, 1));
}

TEST(ChunkStoreTest, SspAppliesEachPushOnArrival) {
  Fixture f(SSP);
  const std::vector<float> w0 = ReadChunk(f.store, 1);
  ASSERT_TRUE(f.store.Push(0, 0, 4, 1, std::vector<float>{1.0f, 2.0f}).ok());
  const std::vector<float> w1 = ReadChunk(f.store, 1);
  EXPECT_FLOAT_EQ(w1[0], w0[0] - 0.5f);
  EXPECT_FLOAT_EQ(w1[1], w0[1] - 1.0f);
  // Worker 0's iteration 0 is in; worker 1's is not.
  EXPECT_FALSE(f.store.Readable(1, 1));
  ASSERT_TRUE(f.store.Push(0, 1, 4, 1, std::vector<float>{1.0f, 2.0f}).ok());
  EXPECT_FALSE(f.store.Readable(1, 1));
  ASSERT_TRUE(f.store.Push(1, 0, 4, 1, std::vector<float>{0.0f, 0.0f}).ok());
  EXPECT_TRUE(f.store.Readable(1, 1));
  EXPECT_FALSE(f.store.Readable(1, 2));
  EXPECT_EQ(f.store.MinAppliedClock(), 0);  // chunk 0 saw nothing yet
}

TEST(ChunkStoreTest, RetriedPushIsTakenOnce) {
  for (Consistency mode : {BSP, SSP}) {
    Fixture f(mode, 1);
    const std::vector<float> w0 = ReadChunk(f.store, 1);
    ASSERT_TRUE(f.store.Push(0, 0, 4, 1, std::vector<float>{1.0f, 1.0f}).ok());
    ASSERT_TRUE(f.store.Push(0, 0, 4, 1, std::vector<float>{1.0f, 1.0f}).ok());
    EXPECT_FLOAT_EQ(ReadChunk(f.store, 1)[0], w0[0] - 0.5f);
  }
}

TEST(ChunkStoreTest, BadPushesChangeNothing) {
  Fixture f(BSP);
  const std::vector<float> w0 = ReadChunk(f.store, 0);
  std::vector<float> g(8, 1.0f);
  EXPECT_EQ(f.store.Push(0, 0, 4, 7, g).code(), absl::StatusCode::kInvalidArgument);  // chunk
  EXPECT_EQ(f.store.Push(0, 0, 4, 0, std::vector<float>(7)).code(),
            absl::StatusCode::kInvalidArgument);                                      // size
  EXPECT_EQ(f.store.Push(2, 0, 4, 0, g).code(), absl::StatusCode::kInvalidArgument);  // worker
  EXPECT_EQ(f.store.Push(0, 1, 4, 0, g).code(), absl::StatusCode::kInvalidArgument);  // clock
  EXPECT_EQ(f.store.Push(0, 0, 0, 0, g).code(), absl::StatusCode::kInvalidArgument);  // samples
  EXPECT_EQ(f.store.Push(0, 0, 9, 0, g).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(f.store.Push(0, 0, 4, 0, g).ok());
  // BSP: a worker may not push its next iteration before the round closes.
  EXPECT_EQ(f.store.Push(0, 1, 4, 0, g).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadChunk(f.store, 0), w0);
  EXPECT_EQ(f.store.CheckChunk(99).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChunkStoreTest, InitialWeightsDoNotDependOnTheServerCount) {
  Fixture one(BSP, 2, 1);
  Fixture two_a(BSP, 2, 2);
  ChunkStore two_b(two_a.job, two_a.partition, 1, MakeOptimizer(two_a.job.optimizer()).value(),
                   nullptr, nullptr);
  for (int32_t chunk = 0; chunk < 2; ++chunk) {
    const ChunkStore& owner = two_a.partition.chunks()[chunk].server == 0 ? two_a.store : two_b;
    EXPECT_EQ(ReadChunk(one.store, chunk), ReadChunk(owner, chunk)) << chunk;
  }
}

// A push with NaN or Inf is taken (the clock moves on) but not applied;
// under BSP the round closes over the other workers' samples.
TEST(ChunkStoreTest, NonFinitePushesAreSkippedAndCounted) {
  Fixture f(BSP);
  const std::vector<float> w0 = ReadChunk(f.store, 0);
  std::vector<float> bad(8, 1.0f), good(8, 2.0f);
  bad[5] = std::numeric_limits<float>::quiet_NaN();
  ASSERT_TRUE(f.store.Push(0, 0, 4, 0, bad).ok());
  ASSERT_TRUE(f.store.Push(1, 0, 4, 0, good).ok());
  EXPECT_TRUE(f.store.Readable(0, 1));
  EXPECT_EQ(f.store.NonfiniteSkipped(), 1);
  const std::vector<float> w1 = ReadChunk(f.store, 0);
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(w1[i], w0[i] - 0.5f * 2.0f);  // good's mean only
  // Both bad: no step at all, and the round still closes.
  bad[5] = std::numeric_limits<float>::infinity();
  ASSERT_TRUE(f.store.Push(0, 1, 4, 0, bad).ok());
  ASSERT_TRUE(f.store.Push(1, 1, 4, 0, bad).ok());
  EXPECT_TRUE(f.store.Readable(0, 2));
  EXPECT_EQ(ReadChunk(f.store, 0), w1);
  EXPECT_EQ(f.store.NonfiniteSkipped(), 3);
}

// Chunk 0's push from `worker` of iteration `clock` without a gradient
// (PushRequest.without_gradient), `samples` samples behind it.
absl::Status PushWithoutGradient(ChunkStore& store, int worker, int64_t clock, int samples,
                                 int64_t values = 0) {
  ChunkStore::PushRequest push;
  push.worker = worker;
  push.clock = clock;
  push.num_samples = samples;
  ChunkStore::PushRequest::Part part;
  part.chunk = 0;
  part.values = values;
  part.absent = true;
  push.parts.push_back(part);
  return store.Push(push, [](size_t) -> absl::Span<const float> {
    ADD_FAILURE() << "a part without a gradient was read";
    return {};
  });
}

// A parameter frozen in a PyTorch script (or whose .grad is None) is
// pushed without a gradient: under BSP its samples count in the round's
// mean but add nothing to its sum, and a round in which no push had a
// gradient takes no step -- no update, no step counted, as torch.optim
// skips the parameter; under SSP nothing is applied.
TEST(ChunkStoreTest, PushesWithoutAGradientTakeNoUpdate) {
  Fixture f(BSP);
  const std::vector<float> w0 = ReadChunk(f.store, 0);
  const std::vector<float> g(8, 1.0f);
  ASSERT_TRUE(f.store.Push(0, 0, 2, 0, g).ok());
  ASSERT_TRUE(PushWithoutGradient(f.store, 1, 0, 6).ok());
  EXPECT_TRUE(f.store.Readable(0, 1));
  // mean = (2 * 1 + 6 * nothing) / 8 = 0.25
  const std::vector<float> w1 = ReadChunk(f.store, 0);
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(w1[i], w0[i] - 0.5f * 0.25f);
  // The same when the push with a gradient closes the round.
  ASSERT_TRUE(PushWithoutGradient(f.store, 0, 1, 6).ok());
  ASSERT_TRUE(f.store.Push(1, 1, 2, 0, g).ok());
  const std::vector<float> w2 = ReadChunk(f.store, 0);
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(w2[i], w1[i] - 0.5f * 0.25f);
  // No gradient from any worker: the round closes without a step.
  ASSERT_TRUE(PushWithoutGradient(f.store, 0, 2, 4).ok());
  ASSERT_TRUE(PushWithoutGradient(f.store, 1, 2, 4).ok());
  EXPECT_TRUE(f.store.Readable(0, 3));
  EXPECT_EQ(ReadChunk(f.store, 0), w2);
  ChunkState state;
  ASSERT_TRUE(f.store.ReadState(0, &state).ok());
  EXPECT_EQ(state.steps(), 2);
  // A part without a gradient that claims values: refused, nothing taken.
  EXPECT_EQ(PushWithoutGradient(f.store, 0, 3, 4, 8).code(), absl::StatusCode::kInvalidArgument);

  Fixture ssp(SSP);
  const std::vector<float> s0 = ReadChunk(ssp.store, 0);
  ASSERT_TRUE(PushWithoutGradient(ssp.store, 0, 0, 4).ok());
  ASSERT_TRUE(PushWithoutGradient(ssp.store, 1, 0, 4).ok());
  EXPECT_TRUE(ssp.store.Readable(0, 1));  // applied: there was nothing to apply
  EXPECT_EQ(ReadChunk(ssp.store, 0), s0);
}

// The round's sum is not zeroed between rounds: the first push taken in a
// round (here after a skipped one) starts it afresh, and a round the
// removal of a worker closes still takes the mean.
TEST(ChunkStoreTest, EachBspRoundSumsOnlyItsOwnPushes) {
  Fixture f(BSP);
  std::vector<float> w = ReadChunk(f.store, 0);
  std::vector<float> bad(8, 1.0f);
  bad[2] = std::numeric_limits<float>::quiet_NaN();
  ASSERT_TRUE(f.store.Push(0, 0, 4, 0, std::vector<float>(8, 2.0f)).ok());
  ASSERT_TRUE(f.store.Push(1, 0, 4, 0, std::vector<float>(8, 4.0f)).ok());
  for (int i = 0; i < 8; ++i) w[i] -= 0.5f * 3.0f;
  EXPECT_EQ(ReadChunk(f.store, 0), w);
  ASSERT_TRUE(f.store.Push(0, 1, 4, 0, bad).ok());
  ASSERT_TRUE(f.store.Push(1, 1, 2, 0, std::vector<float>(8, 1.0f)).ok());
  for (int i = 0; i < 8; ++i) w[i] -= 0.5f * 1.0f;
  EXPECT_EQ(ReadChunk(f.store, 0), w);
  ASSERT_TRUE(f.store.Push(0, 2, 4, 0, std::vector<float>(8, 8.0f)).ok());
  f.store.RemoveWorker(1);  // the sum 4 * 8 over 4 samples
  for (int i = 0; i < 8; ++i) w[i] -= 0.5f * 8.0f;
  EXPECT_EQ(ReadChunk(f.store, 0), w);
}

// SSP/ASP clip each push by the norm its worker reports for the whole push.
TEST(ChunkStoreTest, AspClipsByThePushNorm) {
  Fixture f(ASP, 1, 1, /*clip_norm=*/1.0f);
  const std::vector<float> w0 = ReadChunk(f.store, 1);
  // The worker's whole gradient has norm 4: scaled by 1/4.
  ASSERT_TRUE(f.store.Push(0, 0, 4, 1, std::vector<float>{2.0f, -2.0f}, 4.0f).ok());
  std::vector<float> w1 = ReadChunk(f.store, 1);
  EXPECT_FLOAT_EQ(w1[0], w0[0] - 0.5f * 0.5f);
  EXPECT_FLOAT_EQ(w1[1], w0[1] + 0.5f * 0.5f);
  // Under the bound: unchanged.
  ASSERT_TRUE(f.store.Push(0, 1, 4, 1, std::vector<float>{0.2f, 0.0f}, 0.5f).ok());
  EXPECT_FLOAT_EQ(ReadChunk(f.store, 1)[0], w1[0] - 0.5f * 0.2f);
}

TEST(ChunkStoreTest, BytesHeldPerParameter) {
  Fixture bsp(BSP);  // SGD: weights + the round's sum
  EXPECT_EQ(bsp.store.BytesHeld(), 10 * 8);
  Fixture asp(ASP);  // SGD: weights only
  EXPECT_EQ(asp.store.BytesHeld(), 10 * 4);
}

// Every chunk's weights, in chunk order.
std::vector<float> AllWeights(const ChunkStore& s) {
  std::vector<float> out;
  for (int32_t id : s.chunk_ids()) {
    const std::vector<float> c = ReadChunk(s, id);
    out.insert(out.end(), c.begin(), c.end());
  }
  return out;
}

// One clock of one worker: gradient value `g` for every element.
void PushAll(ChunkStore& s, int64_t clock, float g, int64_t generation = 0) {
  for (int32_t id : s.chunk_ids()) {
    const std::vector<float> grad(s.ChunkNumel(id), g);
    ASSERT_TRUE(s.Push(0, clock, 4, id, grad, 0, generation).ok()) << clock;
  }
}

TEST(ChunkStoreTest, RestoreBringsBackACheckpointAndRefusesOlderGenerations) {
  JobSpec job = SmallDenseJob(BSP, 1);
  job.mutable_optimizer()->set_type(ADAM);  // optimizer state that must come back
  ApplyJobDefaults(&job);
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/restore";
  const Partition partition = Partition::Make(ModelParams(job.model()), 16, 1).value();
  auto make = [&] {
    return std::make_unique<ChunkStore>(job, partition, 0, MakeOptimizer(job.optimizer()).value(),
                                        nullptr, nullptr);
  };
  std::unique_ptr<ChunkStore> live = make();
  ASSERT_GE(live->chunk_ids().size(), 2u);
  const std::vector<float> initial = AllWeights(*live);
  CheckpointWriter writer(dir, 0, "ADAM", live->CheckpointLayout());
  const CheckpointSchedule every2(2);
  live->SetCheckpointing(&writer, &every2);
  PushAll(*live, 0, 0.5f);
  PushAll(*live, 1, -0.25f);
  const std::vector<float> at2 = AllWeights(*live);
  PushAll(*live, 2, 1.0f);
  PushAll(*live, 3, 0.75f);
  const std::vector<float> at4 = AllWeights(*live);
  EXPECT_EQ(writer.latest(), 4);
  EXPECT_EQ(CheckpointClocks(dir, 0), (std::vector<int64_t>{2, 4}));

  // A new process restores clock 2 and replays clocks 2 and 3: the same
  // weights as the first time (Adam's moments and step count came back).
  absl::StatusOr<CheckpointSet> file = CheckpointSet::Open(dir, 2);
  ASSERT_TRUE(file.ok()) << file.status();
  std::unique_ptr<ChunkStore> fresh = make();
  ASSERT_TRUE(fresh->Restore(1, 2, &*file).ok());
  EXPECT_EQ(AllWeights(*fresh), at2);
  EXPECT_EQ(fresh->generation(), 1);
  EXPECT_EQ(fresh->MinAppliedClock(), 2);
  const std::vector<float> grad(fresh->ChunkNumel(fresh->chunk_ids()[0]), 1.0f);
  EXPECT_TRUE(absl::IsFailedPrecondition(fresh->Push(0, 2, 4, fresh->chunk_ids()[0], grad, 0, 0)));
  EXPECT_TRUE(absl::IsUnavailable(fresh->Push(0, 2, 4, fresh->chunk_ids()[0], grad, 0, 2)));
  EXPECT_TRUE(absl::IsFailedPrecondition(fresh->CheckGeneration(0)));
  EXPECT_TRUE(absl::IsUnavailable(fresh->CheckGeneration(2)));
  PushAll(*fresh, 2, 1.0f, 1);
  PushAll(*fresh, 3, 0.75f, 1);
  EXPECT_EQ(AllWeights(*fresh), at4);

  // The live store rolls back too: its later file goes, its pushes of
  // generation 0 are refused.
  ASSERT_TRUE(live->Restore(1, 2, &*file).ok());
  EXPECT_EQ(AllWeights(*live), at2);
  EXPECT_EQ(writer.latest(), 2);
  EXPECT_EQ(CheckpointClocks(dir, 0), (std::vector<int64_t>{2}));
  EXPECT_TRUE(absl::IsFailedPrecondition(live->Push(0, 2, 4, live->chunk_ids()[0], grad, 0, 0)));

  // Clock 0 needs no file: the initial weights.
  ASSERT_TRUE(live->Restore(2, 0, nullptr).ok());
  EXPECT_EQ(AllWeights(*live), initial);
  EXPECT_EQ(live->MinAppliedClock(), 0);

  // Another clock's checkpoint, or another optimizer's, is refused.
  EXPECT_TRUE(absl::IsInvalidArgument(fresh->Restore(3, 4, &*file)));
  JobSpec sgd = job;
  sgd.mutable_optimizer()->set_type(SGD);
  ChunkStore other(sgd, partition, 0, MakeOptimizer(sgd.optimizer()).value(), nullptr, nullptr);
  EXPECT_TRUE(absl::IsInvalidArgument(other.Restore(1, 2, &*file)));
  EXPECT_TRUE(absl::IsNotFound(CheckpointSet::Open(dir, 3).status()));
}

// The checkpoint two servers wrote restores into one server holding every
// chunk (another placement): each chunk from the file that has it, and
// training goes on as it would have on the two.
TEST(ChunkStoreTest, ACheckpointRestoresUnderAnotherPlacement) {
  JobSpec job = SmallDenseJob(BSP, 1);
  job.mutable_optimizer()->set_type(ADAM);
  ApplyJobDefaults(&job);
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/placements";
  const std::vector<ParamInfo> params = ModelParams(job.model());
  const Partition two = Partition::Make(params, 16, 2).value();
  std::vector<std::unique_ptr<ChunkStore>> stores;
  std::vector<std::unique_ptr<CheckpointWriter>> writers;
  const CheckpointSchedule every2(2);
  for (int s = 0; s < 2; ++s) {
    stores.push_back(std::make_unique<ChunkStore>(
        job, two, s, MakeOptimizer(job.optimizer()).value(), nullptr, nullptr));
    writers.push_back(
        std::make_unique<CheckpointWriter>(dir, s, "ADAM", stores[s]->CheckpointLayout()));
    stores[s]->SetCheckpointing(writers[s].get(), &every2);
  }
  for (int64_t clock = 0; clock < 4; ++clock) {
    for (auto& s : stores) PushAll(*s, clock, 0.25f * (clock + 1));
  }
  const CheckpointSet set = CheckpointSet::Open(dir, 4).value();
  EXPECT_EQ(set.servers(), (std::vector<int>{0, 1}));
  const Partition one = Partition::Make(params, 16, 1).value();
  ChunkStore alone(job, one, 0, MakeOptimizer(job.optimizer()).value(), nullptr, nullptr);
  ASSERT_TRUE(alone.Restore(1, 4, &set).ok());
  for (int64_t clock = 4; clock < 6; ++clock) {
    for (auto& s : stores) PushAll(*s, clock, -0.5f);
    PushAll(alone, clock, -0.5f, 1);
  }
  for (const ChunkInfo& c : two.chunks()) {
    const std::vector<float> there = ReadChunk(*stores[c.server], c.id);
    const std::vector<float> here = ReadChunk(alone, c.id);
    EXPECT_EQ(here, there) << "chunk " << c.id;
  }
}

}  // namespace
}  // namespace pstrain

namespace pstrain {
namespace {

// An EXTERNAL model's chunks hold no weights until a worker pushes their
// initial values: no read guarantee holds before; the first are kept, later
// ones (a retry, or another worker's) are ignored; values not in fp32 are
// refused.
TEST(ChunkStoreTest, AnExternalModelsChunksWaitForTheirInitialValues) {
  JobSpec job;
  ParamSpec* p = job.mutable_model()->add_params();
  p->set_name("fc.weight");
  p->add_shape(3);
  p->add_shape(4);
  job.mutable_model()->set_kind(EXTERNAL);
  job.mutable_data()->set_dataset(EXTERNAL_DATA);
  job.mutable_data()->set_train_size(100);
  job.set_batch_size(10);
  job.set_num_workers(2);
  job.set_num_servers(1);
  ApplyJobDefaults(&job);
  ASSERT_TRUE(ValidateJobSpec(job).ok()) << ValidateJobSpec(job);
  const Partition partition =
      Partition::Make(ModelParams(job.model()), job.chunk_bytes(), 1).value();
  ChunkStore store(job, partition, 0, MakeOptimizer(job.optimizer()).value(), nullptr, nullptr);
  ASSERT_EQ(store.chunk_ids().size(), 1u);
  const int32_t chunk = store.chunk_ids()[0];
  EXPECT_FALSE(store.Readable(chunk, 0));

  auto initial = [&](int worker, float value, const std::string& dtype) {
    ChunkStore::PushRequest push;
    push.initial_values = true;
    push.worker = worker;
    push.wire_dtype = dtype;
    push.parts.push_back({chunk, 12, 48});
    const std::vector<float> values(12, value);
    return store.Push(push, [&](size_t) { return absl::MakeConstSpan(values); });
  };
  EXPECT_EQ(initial(0, 1.0f, "bf16").code(), absl::StatusCode::kInvalidArgument);
  ChunkStore::PushRequest empty;
  empty.initial_values = true;
  EXPECT_EQ(store.Push(empty, [](size_t) { return absl::Span<const float>(); }).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(store.Readable(chunk, 0));
  ASSERT_TRUE(initial(0, 2.5f, "fp32").ok());
  EXPECT_TRUE(store.Readable(chunk, 0));
  ASSERT_TRUE(initial(1, -7.0f, "fp32").ok());
  EXPECT_EQ(ReadChunk(store, chunk), std::vector<float>(12, 2.5f));
  // A rollback to clock 0 without a checkpoint waits for initial values again.
  ASSERT_TRUE(store.Restore(1, 0, nullptr).ok());
  EXPECT_FALSE(store.Readable(chunk, 0));
}

// A built-in model's servers initialise its weights: initial values pushed
// by a worker are refused.
TEST(ChunkStoreTest, ABuiltInModelRefusesInitialValues) {
  Fixture f(BSP);
  const int32_t chunk = f.store.chunk_ids()[0];
  const std::vector<float> before = ReadChunk(f.store, chunk);
  ChunkStore::PushRequest push;
  push.initial_values = true;
  push.parts.push_back({chunk, static_cast<int64_t>(before.size()),
                        static_cast<int64_t>(before.size() * 4)});
  const std::vector<float> values(before.size(), 3.0f);
  EXPECT_EQ(f.store.Push(push, [&](size_t) { return absl::MakeConstSpan(values); }).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadChunk(f.store, chunk), before);
}

}  // namespace
}  // namespace pstrain
