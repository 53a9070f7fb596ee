#include "common/job_spec.h"

#include <limits>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/job_sizes.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(JobSpecTest, DefaultsMakeTheQuickstartModel) {
  JobSpec job;
  ApplyJobDefaults(&job);
  EXPECT_TRUE(ValidateJobSpec(job).ok());
  EXPECT_EQ(job.data().dataset(), FASHION_MNIST);
  EXPECT_EQ(job.data().path(), "/usr/share/datasets/fashion-mnist");
  EXPECT_EQ(job.model().input_dim(), 784);
  ASSERT_EQ(job.model().layers_size(), 6);
  EXPECT_EQ(job.model().layers(0).units(), 256);
  EXPECT_EQ(job.model().layers(0).name(), "dense0");
  EXPECT_EQ(job.model().layers(4).units(), 10);
  EXPECT_EQ(job.optimizer().type(), ADAM);
  EXPECT_FLOAT_EQ(job.optimizer().learning_rate(), 1e-3f);
  EXPECT_EQ(job.consistency(), BSP);
  EXPECT_EQ(job.chunk_bytes(), 1 << 20);
}

TEST(JobSpecTest, ParseErrorNamesFileLineAndColumn) {
  absl::StatusOr<JobSpec> job = ParseJobSpecText("name: \"a\"\n\nbatch_size: x\n", "j.pbtxt");
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(job.status().message(), "j.pbtxt:3:13:")) << job.status();
}

// The clock counts were called steps before issue 25: an old job file is
// refused naming the new field, wherever the old one stands.
TEST(JobSpecTest, AFieldRenamedIsRefusedNamingItsNewName) {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {"name: \"a\"\nsteps: 10\n", "j.pbtxt:2:6: field \"steps\" is now \"clocks\""},
      {"optimizer { schedule { type: WARMUP_COSINE warmup_steps: 5 } }",
       "j.pbtxt:1:56: field \"warmup_steps\" is now \"warmup_clocks\""},
      {"optimizer { schedule {\n decay_steps: 5 } }",
       "j.pbtxt:2:13: field \"decay_steps\" is now \"decay_clocks\""},
      // A server's copy is a standby; a replica is a pipeline's (issue 69).
      {"num_servers: 2\nreplicas: 1\n",
       "j.pbtxt:2:9: field \"replicas\" is now \"standby_copies\""},
  };
  for (const Case& c : cases) {
    absl::StatusOr<JobSpec> job = ParseJobSpecText(c.text, "j.pbtxt");
    ASSERT_FALSE(job.ok()) << c.text;
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(job.status().message()), c.message);
  }
  // Any other unknown field keeps the parser's own words.
  absl::StatusOr<JobSpec> other = ParseJobSpecText("stepz: 10", "j.pbtxt");
  EXPECT_TRUE(absl::StrContains(other.status().message(), "no field named \"stepz\""))
      << other.status();
}

TEST(JobSpecTest, MissingFileIsNotFound) {
  absl::StatusOr<JobSpec> job = LoadJobSpec("/nonexistent.pbtxt");
  EXPECT_EQ(job.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(job.status().message(), "/nonexistent.pbtxt"));
}

JobSpec Complete(const std::string& text) {
  JobSpec job = ParseJobSpecText(text, "t").value();
  ApplyJobDefaults(&job);
  return job;
}

// consistency_plan: psctl set-consistency's rules, before the job starts.
TEST(JobSpecTest, AConsistencyPlanFollowsTheRulesOfARunTimeChange) {
  auto code = [](const std::string& text) { return ValidateJobSpec(Complete(text)).code(); };
  const std::string warm_up = "consistency_plan { clock: 50 consistency: SSP staleness: 1 }";
  EXPECT_EQ(code("consistency: BSP " + warm_up), absl::StatusCode::kOk);
  EXPECT_EQ(code(warm_up), absl::StatusCode::kOk);  // (unset: BSP)
  for (const std::string& bad : {
           "consistency: SSP staleness: 1 " + warm_up,  // does not start under BSP
           std::string("consistency_plan { clock: 0 consistency: SSP staleness: 1 }"),
           warm_up + " consistency_plan { clock: 50 consistency: ASP }",  // not ascending
           std::string("consistency_plan { clock: 5 consistency: ASP staleness: 2 }"),
           std::string("consistency_plan { clock: 5 consistency: CONSISTENCY_UNSPECIFIED }"),
           std::string("consistency_plan { clock: 5 consistency: ASP unix_ms: 7 }"),
           "optimizer { type: SGD learning_rate: 0.1 clip_norm: 1 } " + warm_up,
       }) {
    EXPECT_EQ(code(bad), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(JobSpecTest, ValidationNamesTheProblem) {
  auto message = [](const std::string& text) {
    return std::string(ValidateJobSpec(Complete(text)).message());
  };
  EXPECT_TRUE(absl::StrContains(message("consistency: BSP staleness: 2"), "staleness must be 0"));
  EXPECT_TRUE(absl::StrContains(message("model { input_dim: 10 }"), "input_dim is 10"));
  EXPECT_TRUE(absl::StrContains(
      message("model { layers { type: DENSE units: 5 } layers { type: SOFTMAX_XENT } }"),
      "5 units but the data has 10 classes"));
  EXPECT_TRUE(absl::StrContains(
      message("model { layers { type: SOFTMAX_XENT } layers { type: DENSE units: 10 } }"),
      "must be the last layer"));
  EXPECT_TRUE(absl::StrContains(message("optimizer { learning_rate: -1 }"), "learning_rate"));
  EXPECT_TRUE(absl::StrContains(message("chunk_bytes: 6"), "chunk_bytes"));
  EXPECT_TRUE(absl::StrContains(message("chunk_bytes: 134217728"), "64 MiB"));
  EXPECT_TRUE(absl::StrContains(message("wire_dtype: 9"), "wire_dtype"));
  EXPECT_TRUE(absl::StrContains(message("optimizer { type: RMSPROP rho: 1.5 }"), "rho"));
  EXPECT_TRUE(absl::StrContains(message("optimizer { clip_norm: -1 }"), "clip_norm"));
  EXPECT_TRUE(absl::StrContains(message("optimizer { schedule { type: WARMUP_COSINE min_lr: 5 } }"),
                                "min_lr"));
  EXPECT_TRUE(absl::StrContains(message("batch_size: 100000"), "exceeds the training set"));
  // A 4-byte chunk of a GPT of 10M parameters: millions of chunks.
  const std::string many = message(
      "model { kind: GPT gpt { layers: 3 heads: 4 width: 528 context: 64 } }\n"
      "data { dataset: TEXT path: \"/x\" }\nclocks: 10\nchunk_bytes: 4");
  EXPECT_TRUE(absl::StrContains(many, "raise chunk_bytes")) << many;
}

TEST(JobSpecTest, SizesNoWorkerCanAllocateAreRefusedNamingTheField) {
  auto check = [](const std::string& text) { return ValidateJobSpec(Complete(text)); };
  const std::string gpt = "model { kind: GPT }\ndata { dataset: TEXT path: \"/x\" }\nclocks: 10\n";
  const std::string synthetic =
      "model { layers { type: DENSE units: 4 } layers { type: SOFTMAX_XENT } }\n"
      "data { dataset: SYNTHETIC synthetic_classes: 4 ";
  // 2e9 sequences of 64 tokens: past the kernels' 32-bit counts.
  absl::Status st = check(gpt + "batch_size: 2000000000");
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_TRUE(absl::StartsWith(st.message(), "job spec: batch_size (2000000000)")) << st;
  // Split over 1024 workers it is 2M sequences each: a worker's share counts.
  EXPECT_TRUE(check(gpt + "batch_size: 2000000000 num_workers: 1024").ok());
  // 2e9 synthetic examples of 32 features: 264 GB in every worker.
  st = check(synthetic + "synthetic_train_size: 2000000000 synthetic_dim: 32 }");
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_TRUE(absl::StartsWith(st.message(), "job spec: data.synthetic_train_size")) << st;
  st = check(synthetic + "synthetic_train_size: 2000000000 }\nbatch_size: 2000000000");
  EXPECT_TRUE(absl::StartsWith(st.message(), "job spec: data.synthetic_train_size")) << st;
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  // An MLP's batch of 2e9 rows on a data set that would fit.
  st = check(synthetic +
             "synthetic_train_size: 2000000000 synthetic_dim: 1 }\n"
             "batch_size: 2000000000");
  EXPECT_TRUE(absl::StartsWith(st.message(), "job spec: batch_size (2000000000)")) << st;
  // Large but sane ones pass; the arithmetic saturates instead of wrapping.
  EXPECT_TRUE(check(gpt + "batch_size: 200000").ok());
  EXPECT_TRUE(check(synthetic + "synthetic_train_size: 10000000 }\nbatch_size: 100000").ok());
  EXPECT_TRUE(check("model { kind: GPT }\ndata { dataset: TEXT path: \"/x\" }\n"
                    "batch_size: 1000\nclocks: 9223372036854775807")
                  .ok());
  EXPECT_EQ(SaturatingMul(int64_t{1} << 62, 4), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(SaturatingAdd(std::numeric_limits<int64_t>::max(), 1),
            std::numeric_limits<int64_t>::max());
  EXPECT_EQ(SaturatingMul(3, 5), 15);
}

// The tables' limits (common/job_sizes.h), at them and just past them.
TEST(JobSpecTest, TablesAreHeldToTheirLimits) {
  auto tables = [](int n, const std::string& extra) {
    std::string out;
    for (int i = 0; i < n; ++i) {
      out += absl::StrCat("tables { name: \"t", i, "\" width: 64 ", extra, " }\n");
    }
    return out;
  };
  auto check = [](const std::string& text) { return ValidateJobSpec(Complete(text)); };
  // 256 tables with admission, each budget its filter and a row: accepted.
  const int64_t least = kAdmissionFilterBytes + 4 * 64 * 3 + kRowBookkeepingBytes;
  EXPECT_TRUE(
      check(tables(kMaxTables, absl::StrCat("admit_after: 2 memory_budget_bytes: ", least))).ok());
  absl::Status st = check(tables(kMaxTables + 1, ""));
  EXPECT_TRUE(absl::StartsWith(st.message(), "job spec: tables (257)")) << st;
  st = check(tables(1, absl::StrCat("admit_after: 2 memory_budget_bytes: ", least - 1)));
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "memory_budget_bytes")) << st;
  EXPECT_TRUE(check(tables(1, "num_ids: 9223372036854775808")).ok());  // 2^63
  st = check(tables(1, "num_ids: 9223372036854775809"));
  EXPECT_TRUE(absl::StrContains(st.message(), "num_ids (9223372036854775809)")) << st;
  EXPECT_TRUE(check(tables(1, "memory_budget_bytes: 1099511627776")).ok());  // 1 TiB
  st = check(tables(1, "memory_budget_bytes: 1099511627777"));
  EXPECT_TRUE(absl::StrContains(st.message(), "memory_budget_bytes (1099511627777)")) << st;
}

// The read guarantee of these clocks is common/job_consistency_test.
TEST(JobSpecTest, Clocks) {
  JobSpec job = Complete("batch_size: 100 epochs: 3");
  EXPECT_EQ(ClocksPerEpoch(job), 600);
  EXPECT_EQ(TotalClocks(job), 1800);
  job.set_clocks(7);
  EXPECT_EQ(TotalClocks(job), 7);
}

}  // namespace
}  // namespace pstrain

namespace pstrain {
namespace {

// A zero written in the spec is a zero, not "unset": fields whose zero is
// valid keep it; for the others the spec is refused, naming the field.
struct WrittenZero {
  std::string text;                          // the job spec, with the field written as 0
  std::string refusal;                       // "" when the zero is valid, else a part of the error
  float (*value)(const JobSpec&) = nullptr;  // the field, when the zero is valid
};

class WrittenZeroTest : public ::testing::TestWithParam<WrittenZero> {};

TEST_P(WrittenZeroTest, IsKeptOrRefused) {
  const WrittenZero& z = GetParam();
  JobSpec job = ParseJobSpecText(z.text, "t").value();
  ApplyJobDefaults(&job);
  const absl::Status st = ValidateJobSpec(job);
  if (z.refusal.empty()) {
    EXPECT_TRUE(st.ok()) << st;
    EXPECT_EQ(z.value(job), 0.0f) << z.text;
  } else {
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << z.text;
    EXPECT_TRUE(absl::StrContains(st.message(), z.refusal)) << st;
  }
}

// Pipelines: each bad setting is refused before training, naming what.
TEST(JobSpecTest, PipelineSettingsAreChecked) {
  struct Case {
    std::string text, refusal;
  };
  const std::vector<Case> bad = {
      {"pipeline_stages: 4 num_workers: 4", "pipeline_stages (4) must be in [1, 3]"},
      {"pipeline_stages: 2 num_workers: 3",
       "num_workers (3) must be a multiple of pipeline_stages"},
      {"pipeline_stages: 2 num_workers: 2 micro_batches: 0", "micro_batches"},
      {"pipeline_stages: 2 num_workers: 4 batch_size: 64 micro_batches: 5",
       "micro_batches (5) must divide each replica's share"},
      {"pipeline_stages: 2 num_workers: 4 batch_size: 63", "must divide each replica's share"},
      {"pipeline_stages: 2 num_workers: 2 pipeline_schedule: 7", "pipeline_schedule 7 is unknown"},
  };
  for (const Case& c : bad) {
    absl::StatusOr<JobSpec> job = ParseJobSpecText(c.text, "j");
    ASSERT_TRUE(job.ok()) << job.status();
    ApplyJobDefaults(&*job);
    const absl::Status st = ValidateJobSpec(*job);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_TRUE(absl::StrContains(st.message(), c.refusal)) << c.text << ": " << st;
  }
  absl::StatusOr<JobSpec> job =
      ParseJobSpecText("pipeline_stages: 2 num_workers: 4 batch_size: 64 micro_batches: 4", "j");
  ASSERT_TRUE(job.ok());
  ApplyJobDefaults(&*job);
  EXPECT_TRUE(ValidateJobSpec(*job).ok()) << ValidateJobSpec(*job);
  EXPECT_EQ(job->pipeline_schedule(), ONE_F_ONE_B);
}

// A GPT job with `gpt` inside its model spec and `data` inside its data spec.
std::string Gpt(const std::string& gpt, const std::string& data = "") {
  return "model { kind: GPT gpt { " + gpt + " } } data { dataset: TEXT " + data + " } clocks: 10";
}
std::string Synthetic(const std::string& data) {
  return "data { dataset: SYNTHETIC " + data + " }";
}

INSTANTIATE_TEST_SUITE_P(
    Fields, WrittenZeroTest,
    ::testing::Values(
        WrittenZero{"optimizer { type: MOMENTUM momentum: 0 }", "",
                    [](const JobSpec& j) { return j.optimizer().momentum(); }},
        WrittenZero{"optimizer { type: NESTEROV momentum: 0 }", "",
                    [](const JobSpec& j) { return j.optimizer().momentum(); }},
        WrittenZero{"optimizer { type: ADAM beta1: 0 }", "",
                    [](const JobSpec& j) { return j.optimizer().beta1(); }},
        WrittenZero{"optimizer { type: ADAMW beta2: 0 }", "",
                    [](const JobSpec& j) { return j.optimizer().beta2(); }},
        WrittenZero{"optimizer { learning_rate: 0 }", "learning_rate"},
        WrittenZero{"optimizer { epsilon: 0 }", "epsilon"},
        WrittenZero{"optimizer { type: RMSPROP rho: 0 }", "rho"},
        WrittenZero{"optimizer { type: ADAFACTOR decay_rate: 0 }", "decay_rate"},
        WrittenZero{"optimizer { type: ADAFACTOR clip_threshold: 0 }", "clip_threshold"},
        WrittenZero{"optimizer { schedule { type: STEP_DECAY step_size: 10 gamma: 0 } }", "gamma"},
        WrittenZero{Gpt("", "validation_fraction: 0"), "validation_fraction"},
        WrittenZero{Gpt("layers: 0"), "gpt.layers"}, WrittenZero{Gpt("heads: 0"), "gpt.heads"},
        WrittenZero{Gpt("width: 0"), "gpt.width"}, WrittenZero{Gpt("context: 0"), "gpt.context"},
        WrittenZero{Synthetic("synthetic_train_size: 0"), "synthetic"},
        WrittenZero{Synthetic("synthetic_test_size: 0"), "synthetic"},
        WrittenZero{Synthetic("synthetic_dim: 0"), "synthetic"},
        WrittenZero{Synthetic("synthetic_classes: 0"), "synthetic"},
        WrittenZero{"model { input_dim: 0 }", "input_dim"},
        WrittenZero{"batch_size: 0", "batch_size"}, WrittenZero{"epochs: 0", "epochs"},
        WrittenZero{"chunk_bytes: 0", "chunk_bytes"}, WrittenZero{"num_servers: 0", "num_servers"},
        WrittenZero{"num_workers: 0", "num_workers"}, WrittenZero{"log_every: 0", "log_every"},
        WrittenZero{"micro_batches: 0", "micro_batches"},
        WrittenZero{"pipeline_stages: 0", "pipeline_stages"}));

}  // namespace
}  // namespace pstrain
