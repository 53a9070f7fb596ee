// The override table: every entry names a real field, a flag given
// replaces its field (with any value, a default's included), one not given
// keeps it, and a bad value is refused naming the flag.
#include "scheduler/spec_overrides.h"

#include <string>

#include "absl/strings/match.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

JobSpec Spec(const std::string& text) {
  JobSpec job;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &job)) << text;
  return job;
}

TEST(SpecOverridesTest, EveryFlagOfTheTableSetsItsField) {
  const SpecOverrides given = {
      {"staleness", "2"},
      {"num_servers", "3"},
      {"num_workers", "4"},
      {"batch_size", "64"},
      {"epochs", "5"},
      {"clocks", "600"},
      {"seed", "9"},
      {"checkpoint_every", "7"},
      {"pipeline_stages", "2"},
      {"micro_batches", "8"},
      {"data_dir", "/data"},
      {"checkpoint_dir", "/ckpt"},
      {"consistency", "SSP"},
      {"pipeline_schedule", "gpipe"},
      {"table_consistency", "asp"},
      {"standby_copies", "1"},
      {"compression", "top_k"},
      {"compression_pulls", "1"},
  };
  ASSERT_EQ(given.size(), SpecOverrideFlags().size()) << "a flag of the table is not tested";
  JobSpec job;
  ASSERT_TRUE(ApplyOverrides(given, &job).ok());
  EXPECT_EQ(
      job.DebugString(),
      Spec("data { path: \"/data\" } consistency: SSP staleness: 2 batch_size: 64 "
           "epochs: 5 clocks: 600 seed: 9 num_servers: 3 num_workers: 4 "
           "micro_batches: 8 checkpoint_dir: \"/ckpt\" checkpoint_every: 7 "
           "pipeline_stages: 2 pipeline_schedule: GPIPE table_consistency: ASP standby_copies: 1 "
           "compression { codec: TOP_K pulls: true }")
          .DebugString());
}

TEST(SpecOverridesTest, AFlagNotGivenKeepsTheSpecs) {
  JobSpec job = Spec("consistency: SSP staleness: 3 seed: 7 pipeline_schedule: GPIPE");
  ASSERT_TRUE(ApplyOverrides({{"seed", "0"}, {"pipeline_schedule", "1F1B"}}, &job).ok());
  EXPECT_EQ(job.DebugString(),
            Spec("consistency: SSP staleness: 3 pipeline_schedule: ONE_F_ONE_B").DebugString());
}

TEST(SpecOverridesTest, ABadValueIsRefusedNamingTheFlagAndTheJobIsUntouched) {
  struct Case {
    SpecOverrides given;
    const char* message;
  };
  const Case cases[] = {
      {{{"num_workers", "0"}}, "--num_workers=0: expected an integer in [1, 65536]"},
      {{{"clocks", "-1"}}, "--clocks=-1: expected an integer in [0, 2^63-1]"},
      {{{"staleness", "2147483648"}}, "--staleness=2147483648: expected an integer in [0, "},
      {{{"consistency", "XSP"}}, "--consistency=xsp: expected one of bsp, ssp, asp"},
      {{{"pipeline_schedule", ""}}, "--pipeline_schedule=: expected one of gpipe, 1f1b"},
      {{{"data_dir", ""}}, "--data_dir= (empty): expected a directory"},
      {{{"compression", "gzip"}},
       "--compression=gzip: expected one of none, sign, top_k, int8, int4"},
      {{{"steps", "10"}}, "--steps overrides no field of the job spec"},
      // The first bad flag in the table's order.
      {{{"consistency", "x"}, {"batch_size", "0"}}, "--batch_size=0"},
  };
  for (const Case& c : cases) {
    JobSpec job = Spec("seed: 7");
    const absl::Status st = ApplyOverrides(c.given, &job);
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
    EXPECT_TRUE(absl::StrContains(st.message(), c.message)) << st;
    EXPECT_EQ(job.DebugString(), Spec("seed: 7").DebugString());
  }
}

}  // namespace
}  // namespace pstrain
