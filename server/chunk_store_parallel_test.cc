// A push's parts on the store's thread pool (PushRequest::parts_in_parallel,
// as a shared-memory push's are): many chunks in flight from two workers at
// once, each worker's requests on a thread of its own and each request
// spread over the pool, give what the same pushes give applied one part at
// a time without a pool.
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "common/job_spec.h"
#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "server/chunk_store.h"
#include "server/store_testing.h"

namespace pstrain {
namespace {

// One dense layer of 4 x 65536 weights and 65536 biases, Adam, 1024
// values a chunk: 320 chunks, a push of them all above the store's
// threshold for the pool (ChunkStore's kParallelPushValues).
JobSpec WideJob(Consistency mode) {
  JobSpec job = SmallDenseJob(mode, 2);
  job.mutable_model()->mutable_layers(0)->set_units(65536);
  job.mutable_optimizer()->set_type(ADAM);
  job.mutable_optimizer()->set_learning_rate(0.01f);
  job.set_chunk_bytes(4096);
  return job;
}

// Worker `worker`'s push of clock `clock`: one request with every chunk.
absl::Status PushAll(ChunkStore& store, int worker, int64_t clock, bool parallel) {
  ChunkStore::PushRequest push;
  push.worker = worker;
  push.clock = clock;
  push.num_samples = 4;
  push.parts_in_parallel = parallel;
  std::vector<std::vector<float>> grads;
  for (int32_t chunk : store.chunk_ids()) {
    const int64_t n = store.ChunkNumel(chunk);
    push.parts.push_back({chunk, n, n * static_cast<int64_t>(sizeof(float))});
    std::vector<float>& g = grads.emplace_back(n);
    for (int64_t i = 0; i < n; ++i) g[i] = std::sin(clock * 7.0f + worker * 3.0f + chunk + 0.1f * i);
  }
  return store.Push(push, [&](size_t i) { return absl::MakeConstSpan(grads[i]); });
}

struct Stores {
  explicit Stores(Consistency mode)
      : job(WideJob(mode)),
        partition(Partition::Make(ModelParams(job.model()), job.chunk_bytes(), 1).value()),
        pool(4),
        parallel(job, partition, 0, MakeOptimizer(job.optimizer()).value(), &pool, nullptr),
        serial(job, partition, 0, MakeOptimizer(job.optimizer()).value(), nullptr, nullptr) {}
  JobSpec job;
  Partition partition;
  ThreadPool pool;
  ChunkStore parallel, serial;
};

// Both workers' pushes of `clock` into the parallel store at once.
void PushBothAtOnce(ChunkStore& store, int64_t clock) {
  absl::Status st[2];
  std::thread a([&] { st[0] = PushAll(store, 0, clock, true); });
  std::thread b([&] { st[1] = PushAll(store, 1, clock, true); });
  a.join();
  b.join();
  EXPECT_TRUE(st[0].ok()) << st[0];
  EXPECT_TRUE(st[1].ok()) << st[1];
}

// Under BSP a round's sum of two pushes is the same in either order: the
// weights are bit for bit the serial store's.
TEST(ChunkStoreParallelTest, ManyChunksFromTwoWorkersAtOnceGiveTheSerialWeightsUnderBsp) {
  Stores s(BSP);
  ASSERT_EQ(s.parallel.chunk_ids().size(), 320u);
  for (int64_t clock = 0; clock < 8; ++clock) {
    PushBothAtOnce(s.parallel, clock);
    for (int w : {1, 0}) ASSERT_TRUE(PushAll(s.serial, w, clock, false).ok());
  }
  for (int32_t chunk : s.parallel.chunk_ids()) {
    EXPECT_TRUE(s.parallel.Readable(chunk, 8)) << chunk;
    const std::vector<float> a = ReadChunk(s.parallel, chunk), b = ReadChunk(s.serial, chunk);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "chunk " << chunk;
  }
}

// Under ASP each push is applied as it comes, so the two workers' order
// per chunk is the threads'; every push is applied once all the same: a
// retry of each is a duplicate, and each chunk holds both workers' 8
// clocks.
TEST(ChunkStoreParallelTest, ManyChunksFromTwoWorkersAtOnceAreEachAppliedOnceUnderAsp) {
  Stores s(ASP);
  const std::vector<float> before = ReadChunk(s.parallel, 0);
  for (int64_t clock = 0; clock < 8; ++clock) {
    PushBothAtOnce(s.parallel, clock);
    // A retried push (its reply lost) is acknowledged and not applied again.
    const std::vector<float> applied = ReadChunk(s.parallel, 5);
    ASSERT_TRUE(PushAll(s.parallel, 0, clock, true).ok());
    EXPECT_EQ(ReadChunk(s.parallel, 5), applied);
  }
  EXPECT_EQ(s.parallel.MinAppliedClock(), 8);
  for (int32_t chunk : s.parallel.chunk_ids()) {
    EXPECT_TRUE(s.parallel.Readable(chunk, 8)) << chunk;
    for (float v : ReadChunk(s.parallel, chunk)) ASSERT_TRUE(std::isfinite(v)) << chunk;
  }
  EXPECT_NE(ReadChunk(s.parallel, 0), before);
}

}  // namespace
}  // namespace pstrain
