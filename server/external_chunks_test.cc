// An EXTERNAL model's chunks on a server: its buffers' (ParamSpec.buffer)
// take pushed values by the rule, not an optimizer step; the optimizer's
// state is read back (ReadState) and seeded before the initial values
// (WriteState).
#include <optional>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "gtest/gtest.h"
#include "server/chunk_store.h"
#include "server/store_testing.h"

namespace pstrain {
namespace {

// fc.weight [4], trained; bn.running_mean [4], a buffer of `rule`.
JobSpec BufferJob(BufferRule rule, Consistency mode) {
  JobSpec job;
  for (const char* name : {"fc.weight", "bn.running_mean"}) {
    ParamSpec* p = job.mutable_model()->add_params();
    p->set_name(name);
    p->add_shape(4);
  }
  job.mutable_model()->mutable_params(1)->set_buffer(rule);
  job.mutable_model()->set_kind(EXTERNAL);
  job.mutable_data()->set_dataset(EXTERNAL_DATA);
  job.mutable_data()->set_train_size(100);
  job.set_batch_size(10);
  job.set_num_workers(2);
  job.set_num_servers(1);
  job.set_consistency(mode);
  if (mode == SSP) job.set_staleness(1);
  job.mutable_optimizer()->set_type(SGD);
  ApplyJobDefaults(&job);
  return job;
}

class BufferChunksTest : public ::testing::Test {
 protected:
  void Start(BufferRule rule, Consistency mode, OptimizerType optimizer = SGD,
             bool initial_values = true) {
    store_.reset();
    job_ = BufferJob(rule, mode);
    job_.mutable_optimizer()->set_type(optimizer);
    job_.mutable_optimizer()->clear_learning_rate();
    ApplyJobDefaults(&job_);
    ASSERT_TRUE(ValidateJobSpec(job_).ok()) << ValidateJobSpec(job_);
    partition_.emplace(Partition::Make(ModelParams(job_.model()), job_.chunk_bytes(), 1).value());
    store_.emplace(job_, *partition_, 0, MakeOptimizer(job_.optimizer()).value(), nullptr,
                   nullptr);
    ASSERT_EQ(store_->chunk_ids().size(), 2u);
    weight_ = store_->chunk_ids()[0];
    buffer_ = store_->chunk_ids()[1];
    if (initial_values) Initial();
  }
  void Initial() {
    ChunkStore::PushRequest initial;
    initial.initial_values = true;
    initial.parts = {{weight_, 4, 16}, {buffer_, 4, 16}};
    const std::vector<float> zeros(4, 0.0f);
    ASSERT_TRUE(store_->Push(initial, [&](size_t) { return absl::MakeConstSpan(zeros); }).ok());
  }
  // Worker `w`'s push of clock `clock`: gradient 1 for the weight, `value`
  // for the buffer, from `samples` samples.
  void Push(int w, int64_t clock, float value, int samples) {
    ASSERT_TRUE(store_->Push(w, clock, samples, weight_, std::vector<float>(4, 1.0f)).ok());
    ASSERT_TRUE(store_->Push(w, clock, samples, buffer_, std::vector<float>(4, value)).ok());
  }
  std::vector<float> Buffer() { return ReadChunk(*store_, buffer_); }

  JobSpec job_;
  std::optional<Partition> partition_;
  std::optional<ChunkStore> store_;
  int32_t weight_ = 0, buffer_ = 0;
};

TEST_F(BufferChunksTest, BspAveragesTheWorkersValuesBySamples) {
  Start(AVERAGE, BSP);
  Push(0, 0, 1.0f, 3);
  Push(1, 0, 5.0f, 1);
  EXPECT_EQ(Buffer(), std::vector<float>(4, 2.0f));  // (3 * 1 + 1 * 5) / 4
  // The weight took an optimizer step (SGD, lr 0.01): 0 - 0.01 * 1.
  EXPECT_EQ(ReadChunk(*store_, weight_), std::vector<float>(4, -0.01f));
  Push(0, 1, 4.0f, 2);
  Push(1, 1, 4.0f, 2);
  EXPECT_EQ(Buffer(), std::vector<float>(4, 4.0f));  // replaced, not accumulated
}

TEST_F(BufferChunksTest, BspBroadcastsTheLowestLiveWorkersValues) {
  Start(BROADCAST, BSP);
  Push(0, 0, 1.0f, 3);
  Push(1, 0, 5.0f, 1);
  EXPECT_EQ(Buffer(), std::vector<float>(4, 1.0f));
  store_->RemoveWorker(0);  // gone (shrink): worker 1's from now on
  Push(1, 1, 7.0f, 4);
  EXPECT_EQ(Buffer(), std::vector<float>(4, 7.0f));
}

TEST_F(BufferChunksTest, UnderSspEachPushTheRuleTakesReplacesTheValues) {
  Start(BROADCAST, SSP);
  Push(1, 0, 5.0f, 1);
  EXPECT_EQ(Buffer(), std::vector<float>(4, 0.0f));  // not worker 0's
  Push(0, 0, 2.0f, 1);
  EXPECT_EQ(Buffer(), std::vector<float>(4, 2.0f));
  Start(AVERAGE, SSP);
  Push(1, 0, 5.0f, 1);
  EXPECT_EQ(Buffer(), std::vector<float>(4, 5.0f));
  Push(0, 0, 2.0f, 1);
  EXPECT_EQ(Buffer(), std::vector<float>(4, 2.0f));
}

// Adam's m and v of a chunk, written before its initial values, are what
// its first update starts from and what ReadState gives back; written
// after them, they are ignored (the first wins).
TEST_F(BufferChunksTest, TheOptimizersStateIsSeededBeforeTheValuesAndReadBack) {
  Start(AVERAGE, BSP, ADAM, /*initial_values=*/false);
  ChunkState seed;
  seed.set_chunk(weight_);
  seed.set_steps(5);
  seed.set_arrays(2);
  for (float v : {0.5f, 0.5f, 0.5f, 0.5f, 4.0f, 4.0f, 4.0f, 4.0f}) seed.add_state(v);
  ChunkState bad = seed;
  bad.add_state(1.0f);
  EXPECT_TRUE(absl::IsInvalidArgument(store_->WriteState(bad)));
  ASSERT_TRUE(store_->WriteState(seed).ok());
  Initial();
  ChunkState later = seed;
  later.set_steps(9);
  ASSERT_TRUE(store_->WriteState(later).ok());  // ignored: the chunk has its values
  ChunkState read;
  ASSERT_TRUE(store_->ReadState(weight_, &read).ok());
  EXPECT_EQ(read.steps(), 5);
  EXPECT_EQ(std::vector<float>(read.state().begin(), read.state().end()),
            std::vector<float>(seed.state().begin(), seed.state().end()));
  Push(0, 0, 1.0f, 1);
  Push(1, 0, 1.0f, 1);
  ASSERT_TRUE(store_->ReadState(weight_, &read).ok());
  EXPECT_EQ(read.steps(), 6);
  EXPECT_FLOAT_EQ(read.state(0), 0.9f * 0.5f + 0.1f * 1.0f);    // m from the seed
  EXPECT_FLOAT_EQ(read.state(4), 0.999f * 4.0f + 0.001f * 1.0f);  // v
  ChunkState buffer;
  ASSERT_TRUE(store_->ReadState(buffer_, &buffer).ok());
  EXPECT_EQ(buffer.arrays(), 0);  // a buffer keeps no optimizer state
}

TEST(BufferJobTest, BuffersCannotBeClipped) {
  JobSpec job = BufferJob(AVERAGE, BSP);
  job.mutable_optimizer()->set_clip_norm(1.0f);
  const absl::Status st = ValidateJobSpec(job);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  job.mutable_model()->mutable_params(1)->set_buffer(static_cast<BufferRule>(9));
  job.mutable_optimizer()->set_clip_norm(0);
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateJobSpec(job)));
}

}  // namespace
}  // namespace pstrain
