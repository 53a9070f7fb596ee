#include "common/external_model.h"

#include "absl/strings/match.h"
#include "common/job_spec.h"
#include "common/param_specs.h"
#include "common/params.h"
#include "common/stage_plan.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

ParamSpecs Params(std::initializer_list<std::pair<const char*, std::vector<int64_t>>> list) {
  ParamSpecs out;
  for (const auto& [name, shape] : list) {
    ParamSpec* p = out.Add();
    p->set_name(name);
    for (int64_t d : shape) p->add_shape(d);
  }
  return out;
}

ParamSpecs Cnn() {
  return Params({{"conv1.weight", {16, 1, 3, 3}},
                 {"conv1.bias", {16}},
                 {"fc.weight", {10, 2304}},
                 {"fc.bias", {10}}});
}

JobSpec ExternalJob() {
  JobSpec job;
  job.mutable_model()->set_kind(EXTERNAL);
  job.set_clocks(200);
  job.set_batch_size(128);
  job.set_num_workers(2);
  ApplyJobDefaults(&job);
  return job;
}

TEST(ExternalModelTest, DefaultsMakeTheDataTheWorkers) {
  const JobSpec job = ExternalJob();
  EXPECT_EQ(job.data().dataset(), EXTERNAL_DATA);
  EXPECT_TRUE(ValidateJobSpec(job).ok()) << ValidateJobSpec(job);
  JobSpec by_data;
  by_data.mutable_data()->set_dataset(EXTERNAL_DATA);
  by_data.mutable_data()->set_train_size(60000);
  ApplyJobDefaults(&by_data);
  EXPECT_EQ(by_data.model().kind(), EXTERNAL);
  EXPECT_TRUE(ValidateJobSpec(by_data).ok()) << ValidateJobSpec(by_data);
  EXPECT_EQ(TotalClocks(by_data), 60000 / 64);  // one epoch of the default batch
}

TEST(ExternalModelTest, TheFirstWorkerDefinesTheModel) {
  absl::StatusOr<JobSpec> job = JoinExternalModel(ExternalJob(), Cnn(), 60000);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->model().params_size(), 4);
  EXPECT_EQ(job->data().train_size(), 60000);
  const std::vector<ParamInfo> params = ModelParams(job->model());
  ASSERT_EQ(params.size(), 4u);
  EXPECT_EQ(params[2].name, "fc.weight");
  EXPECT_EQ(params[2].numel, 23040);
  EXPECT_EQ(params[0].shape, (std::vector<int64_t>{16, 1, 3, 3}));
  // One stage of every parameter.
  const absl::StatusOr<std::vector<Stage>> stages = PlanStages(job->model(), 1);
  ASSERT_TRUE(stages.ok()) << stages.status();
  EXPECT_EQ(stages->front().first_param, 0);
  EXPECT_EQ(stages->front().end_param, 4);
  // The same list joins; so does a worker that does not say its data's size.
  EXPECT_TRUE(JoinExternalModel(*job, Cnn(), 60000).ok());
  EXPECT_TRUE(JoinExternalModel(*job, Cnn(), 0).ok());
}

// The refusal names the first parameter that differs and how.
void ExpectRefused(const ParamSpecs& offered, const char* names) {
  const absl::StatusOr<JobSpec> job = JoinExternalModel(ExternalJob(), Cnn(), 0);
  ASSERT_TRUE(job.ok());
  const absl::StatusOr<JobSpec> other = JoinExternalModel(*job, offered, 0);
  ASSERT_FALSE(other.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(other.status())) << other.status();
  EXPECT_TRUE(absl::StrContains(other.status().message(), names)) << other.status();
}

TEST(ExternalModelTest, AWorkerWithAnotherModelIsRefusedNamingTheParameter) {
  ParamSpecs shape = Cnn();
  shape[2].set_shape(1, 1152);
  ExpectRefused(shape, "parameter 3 of 4 (fc.weight): shape [10, 1152] here, [10, 2304]");
  ParamSpecs name = Cnn();
  name[1].set_name("conv1.b");
  ExpectRefused(name, "parameter 2 of 4 (conv1.bias): named conv1.b here");
  ParamSpecs dtype = Cnn();
  dtype[0].set_dtype(BF16);
  ExpectRefused(dtype, "parameter 1 of 4 (conv1.weight): dtype BF16 here, FP32");
  ParamSpecs fewer = Cnn();
  fewer.RemoveLast();
  ExpectRefused(fewer, "the first missing: fc.bias");
  ParamSpecs more = Cnn();
  *more.Add() = Cnn()[0];
  more[4].set_name("extra.weight");
  ExpectRefused(more, "the first extra: extra.weight");
}

TEST(ExternalModelTest, AWorkerOfABuiltInModelIsRefused) {
  const absl::StatusOr<JobSpec> job = JoinExternalModel(ExternalJob(), ParamSpecs(), 0);
  EXPECT_TRUE(absl::IsFailedPrecondition(job.status())) << job.status();
  EXPECT_TRUE(absl::StrContains(job.status().message(), "must declare its parameters"));
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateParamSpecs(ParamSpecs())));
}

TEST(ExternalModelTest, AnotherTrainingSetSizeIsRefused) {
  const absl::StatusOr<JobSpec> job = JoinExternalModel(ExternalJob(), Cnn(), 60000);
  ASSERT_TRUE(job.ok());
  const absl::StatusOr<JobSpec> other = JoinExternalModel(*job, Cnn(), 50000);
  EXPECT_TRUE(absl::IsFailedPrecondition(other.status())) << other.status();
}

TEST(ExternalModelTest, ABadListIsInvalidAndNamesTheParameter) {
  struct Case {
    ParamSpecs params;
    const char* names;
  };
  ParamSpecs twice = Params({{"w", {2}}, {"w", {3}}});
  ParamSpecs zero = Params({{"w", {2, 0}}});
  ParamSpecs scalar = Params({{"w", {}}});
  ParamSpecs huge = Params({{"w", {1 << 21, 1 << 21}}});
  ParamSpecs unnamed = Params({{"", {2}}});
  ParamSpecs dtype = Params({{"w", {2}}});
  dtype[0].set_dtype(static_cast<DType>(9));
  for (const Case& c : {Case{twice, "parameter 2 of 2 (w): the name is declared twice"},
                        Case{zero, "dimension < 1"}, Case{scalar, "a scalar is shape [1]"},
                        Case{huge, "elements; at most"}, Case{unnamed, "has no name"},
                        Case{dtype, "dtype 9 is unknown"}}) {
    const absl::StatusOr<JobSpec> job = JoinExternalModel(ExternalJob(), c.params, 0);
    ASSERT_FALSE(job.ok()) << c.names;
    EXPECT_TRUE(absl::IsInvalidArgument(job.status())) << job.status();
    EXPECT_TRUE(absl::StrContains(job.status().message(), c.names)) << job.status();
  }
}

TEST(ExternalModelTest, AModelTooLargeForTheChunksIsRefusedWhenDeclared) {
  JobSpec small_chunks = ExternalJob();
  small_chunks.set_chunk_bytes(4);
  const absl::StatusOr<JobSpec> job =
      JoinExternalModel(small_chunks, Params({{"w", {1 << 12, 1 << 12}}}), 0);
  EXPECT_TRUE(absl::IsInvalidArgument(job.status())) << job.status();
}

TEST(ExternalModelTest, ABuiltInModelRefusesAWorkerThatBringsItsOwn) {
  JobSpec mlp;
  ApplyJobDefaults(&mlp);
  EXPECT_TRUE(absl::IsFailedPrecondition(JoinExternalModel(mlp, Cnn(), 0).status()));
  EXPECT_TRUE(JoinExternalModel(mlp, ParamSpecs(), 0).ok());  // ps_worker declares none
}

TEST(ExternalModelTest, TheJobFileCanFixTheModelAndItsCheckedThere) {
  JobSpec job = ExternalJob();
  *job.mutable_model()->mutable_params() = Cnn();
  EXPECT_TRUE(ValidateJobSpec(job).ok()) << ValidateJobSpec(job);
  job.mutable_model()->mutable_params(1)->set_name("conv1.weight");
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateJobSpec(job))) << ValidateJobSpec(job);
}

TEST(ExternalModelTest, WhatAnExternalJobCannotSay) {
  JobSpec stages = ExternalJob();
  stages.set_pipeline_stages(2);
  EXPECT_FALSE(ValidateJobSpec(stages).ok());
  JobSpec layers = ExternalJob();
  layers.mutable_model()->add_layers()->set_type(DENSE);
  EXPECT_FALSE(ValidateJobSpec(layers).ok());
  JobSpec no_length = ExternalJob();
  no_length.set_clocks(0);
  EXPECT_FALSE(ValidateJobSpec(no_length).ok());
  JobSpec mixed = ExternalJob();
  mixed.mutable_data()->set_dataset(FASHION_MNIST);
  EXPECT_FALSE(ValidateJobSpec(mixed).ok());
}

}  // namespace
}  // namespace pstrain
