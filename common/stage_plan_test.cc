#include "common/stage_plan.h"

#include "absl/strings/match.h"
#include "common/job_spec.h"
#include "common/params.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

ModelSpec Completed(const std::string& model_text) {
  absl::StatusOr<JobSpec> job = ParseJobSpecText(model_text, "test");
  EXPECT_TRUE(job.ok()) << job.status();
  ApplyJobDefaults(&*job);
  EXPECT_TRUE(ValidateJobSpec(*job).ok()) << ValidateJobSpec(*job);
  return job->model();
}

// Every parameter in exactly one stage, in order; stage costs add up.
void ExpectCovers(const ModelSpec& model, const std::vector<Stage>& stages) {
  const std::vector<ModelUnit> units = ModelUnits(model);
  double total = 0;
  for (const ModelUnit& u : units) total += u.flops_per_sample;
  double sum = 0;
  int next_param = 0, next_unit = 0;
  for (const Stage& s : stages) {
    EXPECT_EQ(s.first_param, next_param);
    EXPECT_EQ(s.first_unit, next_unit);
    EXPECT_LT(s.first_unit, s.end_unit);
    next_param = s.end_param;
    next_unit = s.end_unit;
    sum += s.flops_per_sample;
  }
  EXPECT_EQ(next_param, static_cast<int>(ModelParams(model).size()));
  EXPECT_EQ(next_unit, static_cast<int>(units.size()));
  EXPECT_DOUBLE_EQ(sum, total);
}

TEST(StagePlanTest, TheDefaultMlpSplitsAtItsDenseLayersByCompute) {
  const ModelSpec model = Completed("");  // 784-256-256-10
  ASSERT_EQ(ModelUnits(model).size(), 3u);
  EXPECT_DOUBLE_EQ(ModelUnits(model)[0].flops_per_sample, 6.0 * 784 * 256);
  absl::StatusOr<std::vector<Stage>> two = PlanStages(model, 2);
  ASSERT_TRUE(two.ok()) << two.status();
  ExpectCovers(model, *two);
  // dense0 alone costs more than dense2 + dense4 together.
  EXPECT_EQ((*two)[0].end_unit, 1);
  EXPECT_EQ((*two)[0].first_layer, 0);
  EXPECT_EQ((*two)[0].end_layer, 2);  // dense0, relu1
  EXPECT_EQ((*two)[1].first_layer, 2);
  EXPECT_EQ((*two)[1].end_layer, 6);  // dense2 .. xent5
  absl::StatusOr<std::vector<Stage>> three = PlanStages(model, 3);
  ASSERT_TRUE(three.ok());
  ExpectCovers(model, *three);
  EXPECT_EQ((*three)[2].first_layer, 4);
}

TEST(StagePlanTest, AGptSplitsAtBlocksWithEmbeddingsFirstAndTheHeadLast) {
  const ModelSpec model =
      Completed("model { kind: GPT gpt { layers: 4 width: 128 heads: 4 context: 64 } } clocks: 1");
  ASSERT_EQ(ModelUnits(model).size(), 4u);
  absl::StatusOr<std::vector<Stage>> two = PlanStages(model, 2);
  ASSERT_TRUE(two.ok()) << two.status();
  ExpectCovers(model, *two);
  // The head weighs on the last block, not enough to move a cut.
  EXPECT_EQ((*two)[0].end_unit, 2);
  EXPECT_EQ((*two)[0].first_param, 0);  // wte, wpe
  EXPECT_EQ((*two)[0].end_param, 2 + 2 * 12);
  EXPECT_EQ((*two)[1].first_layer, 2);
  EXPECT_EQ((*two)[1].end_layer, 4);
  absl::StatusOr<std::vector<Stage>> four = PlanStages(model, 4);
  ASSERT_TRUE(four.ok());
  ExpectCovers(model, *four);
  EXPECT_GT((*four)[3].flops_per_sample, (*four)[2].flops_per_sample);  // + the head
  EXPECT_TRUE(absl::StrContains(DescribeStages(model, *four), "stage 3: h3"))
      << DescribeStages(model, *four);
}

TEST(StagePlanTest, MoreStagesThanUnitsAreRefused) {
  const ModelSpec model = Completed("");
  absl::StatusOr<std::vector<Stage>> four = PlanStages(model, 4);
  ASSERT_FALSE(four.ok());
  EXPECT_EQ(four.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(four.status().message(), "pipeline_stages")) << four.status();
}

TEST(StagePlanTest, WorkersAreReplicaMajor) {
  EXPECT_EQ(ReplicaOf(5, 2), 2);
  EXPECT_EQ(StageOf(5, 2), 1);
  EXPECT_EQ(ReplicaOf(2, 3), 0);
  EXPECT_EQ(StageOf(2, 3), 2);
}

}  // namespace
}  // namespace pstrain
