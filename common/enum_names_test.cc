// The words of the enums as flags and psctl have always spelled them.
#include "common/enum_names.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/job.pb.h"
#include "proto/member.pb.h"

namespace pstrain {
namespace {

TEST(EnumNamesTest, TheWordIsTheProtoNameInLowerCase) {
  EXPECT_EQ(EnumWord(BSP), "bsp");
  EXPECT_EQ(EnumWord(ASP), "asp");
  EXPECT_EQ(EnumWord(FP32), "fp32");  // number 0, yet a value with a word
  EXPECT_EQ(EnumWord(BF16), "bf16");
  EXPECT_EQ(EnumWord(SCHEDULER), "scheduler");
  EXPECT_EQ(EnumWord(WORKER), "worker");
  EXPECT_EQ(EnumWord(DEAD), "dead");
  EXPECT_EQ(EnumWord(GPIPE), "gpipe");
  EXPECT_EQ(EnumWord(ONE_F_ONE_B), "1f1b");  // the one spelling of its own
}

TEST(EnumNamesTest, UnspecifiedAndUnnamedValuesHaveNoWord) {
  EXPECT_EQ(EnumWord(ROLE_UNSPECIFIED), "unknown");
  EXPECT_EQ(EnumWord(MEMBER_STATE_UNSPECIFIED, "?"), "?");
  EXPECT_EQ(EnumWord(static_cast<DType>(7)), "unknown");
  EXPECT_FALSE(ParseEnumWord<Consistency>("consistency_unspecified").has_value());
}

TEST(EnumNamesTest, ParsingIsTheInverseInAnyCase) {
  EXPECT_EQ(ParseEnumWord<Consistency>("ssp"), SSP);
  EXPECT_EQ(ParseEnumWord<Consistency>("SSP"), SSP);
  EXPECT_EQ(ParseEnumWord<DType>("fp16"), FP16);
  EXPECT_EQ(ParseEnumWord<PipelineSchedule>("1F1B"), ONE_F_ONE_B);
  EXPECT_FALSE(ParseEnumWord<PipelineSchedule>("one_f_one_b").has_value());
  EXPECT_FALSE(ParseEnumWord<DType>("fp8").has_value());
  EXPECT_FALSE(ParseEnumWord<Consistency>("").has_value());
}

TEST(EnumNamesTest, TheWordsAreAFlagsChoicesInOrder) {
  EXPECT_EQ(EnumWords(Consistency_descriptor()), (std::vector<std::string>{"bsp", "ssp", "asp"}));
  EXPECT_EQ(EnumWords(PipelineSchedule_descriptor()),
            (std::vector<std::string>{"gpipe", "1f1b"}));
  EXPECT_EQ(EnumWords(DType_descriptor()), (std::vector<std::string>{"fp32", "bf16", "fp16"}));
}

}  // namespace
}  // namespace pstrain
