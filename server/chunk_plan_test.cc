#include "server/chunk_plan.h"

#include <vector>

#include "common/job_spec.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

// dense(4 -> 3): dense0/weight [4, 3] (12 values), dense0/bias [3];
// 24-byte chunks: whole rows of two, and the bias cut in a 2 and a 1.
JobSpec SmallJob(Consistency mode, int workers, int stages) {
  JobSpec job;
  job.mutable_data()->set_dataset(SYNTHETIC);
  job.mutable_data()->set_synthetic_dim(4);
  job.mutable_data()->set_synthetic_classes(3);
  LayerSpec* dense = job.mutable_model()->add_layers();
  dense->set_type(DENSE);
  dense->set_units(3);
  if (stages > 1) {
    job.mutable_model()->add_layers()->set_type(RELU);
    LayerSpec* second = job.mutable_model()->add_layers();
    second->set_type(DENSE);
    second->set_units(3);
    job.set_pipeline_stages(stages);
  }
  job.mutable_model()->add_layers()->set_type(SOFTMAX_XENT);
  job.mutable_optimizer()->set_type(ADAM);
  job.set_consistency(mode);
  job.set_num_workers(workers);
  job.set_batch_size(8);
  job.set_chunk_bytes(24);
  ApplyJobDefaults(&job);
  return job;
}

TEST(ChunkPlanTest, NamesShapesAndSlabsOfOneServersChunks) {
  const JobSpec job = SmallJob(BSP, 2, 1);
  const std::vector<ParamInfo> params = ModelParams(job.model());
  const Partition partition = Partition::Make(params, job.chunk_bytes(), 1).value();
  const auto optimizer = MakeOptimizer(job.optimizer()).value();
  const std::vector<ChunkPlan> plans = PlanChunks(job, params, partition, 0, *optimizer);
  ASSERT_EQ(plans.size(), partition.ServerChunks(0).size());
  ASSERT_GE(plans.size(), 3u);
  const ChunkPlan& first = plans[0];
  EXPECT_EQ(first.name, "dense0/weight[0:6]");
  EXPECT_EQ(first.shape.rows, 2);  // whole rows of 3
  EXPECT_EQ(first.shape.cols, 3);
  EXPECT_EQ(first.param, &params[0]);
  EXPECT_EQ(first.offset, 0);
  EXPECT_EQ(first.next, plans[1].id);
  EXPECT_EQ(plans.back().next, plans.front().id);  // a clock's pushes go round
  EXPECT_EQ(first.pushers, (std::vector<bool>{true, true}));
  // Adam: two arrays of state; BSP: a round sum as large as the weights.
  EXPECT_EQ(first.layout.weights, 6);
  EXPECT_EQ(first.layout.state, optimizer->StateFloats(first.shape));
  EXPECT_EQ(first.layout.grad, 6);
  EXPECT_EQ(first.layout.gap, kArrayGap);

  const ServerMemoryNeeds needs = MemoryNeedsOf(plans);
  EXPECT_EQ(needs.largest_message, 6 * 4);
  EXPECT_EQ(needs.largest_slab, ChunkMemory::SlabBytes(first.layout));
}

TEST(ChunkPlanTest, WithoutBspNoRoundSum) {
  const JobSpec job = SmallJob(ASP, 1, 1);
  const std::vector<ParamInfo> params = ModelParams(job.model());
  const Partition partition = Partition::Make(params, job.chunk_bytes(), 1).value();
  const auto optimizer = MakeOptimizer(job.optimizer()).value();
  for (const ChunkPlan& c : PlanChunks(job, params, partition, 0, *optimizer)) {
    EXPECT_EQ(c.layout.grad, 0) << c.name;
  }
}

// With two pipeline stages a chunk is pushed by its stage's workers only
// (worker w trains stage w % 2).
TEST(ChunkPlanTest, AStagesChunksArePushedByItsWorkersOnly) {
  const JobSpec job = SmallJob(BSP, 4, 2);
  const std::vector<ParamInfo> params = ModelParams(job.model());
  const Partition partition = Partition::Make(params, job.chunk_bytes(), 1).value();
  const auto optimizer = MakeOptimizer(job.optimizer()).value();
  bool saw[2] = {false, false};
  for (const ChunkPlan& c : PlanChunks(job, params, partition, 0, *optimizer)) {
    ASSERT_TRUE(c.stage == 0 || c.stage == 1) << c.name;
    saw[c.stage] = true;
    for (int w = 0; w < 4; ++w) EXPECT_EQ(c.pushers[w], w % 2 == c.stage) << c.name << " " << w;
  }
  EXPECT_TRUE(saw[0]);
  EXPECT_TRUE(saw[1]);
}

}  // namespace
}  // namespace pstrain
