// Each codec's class on its own: MakeCodec picks the job's, and each
// class writes exactly the layout its header gives (bytes checked one by
// one for a small chunk), leaves in the values what the encoding left out,
// and decodes its own bytes back. common/grad_codec_test.cc tests the
// codecs against plain references through grad_codec.h.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "common/chunk_codec.h"
#include "common/level_codecs.h"
#include "common/sign_codec.h"
#include "common/top_k_codec.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

float FloatAt(const std::vector<char>& bytes, int64_t offset) {
  float f;
  std::memcpy(&f, bytes.data() + offset, 4);
  return f;
}

uint32_t WordAt(const std::vector<char>& bytes, int64_t offset) {
  uint32_t u;
  std::memcpy(&u, bytes.data() + offset, 4);
  return u;
}

TEST(ChunkCodecsTest, MakeCodecPicksTheJobsClass) {
  GradCompression spec;
  spec.set_block(8);
  spec.set_ratio(0.25f);
  spec.set_codec(GradCompression::NONE);
  EXPECT_EQ(MakeCodec(spec), nullptr);
  spec.set_codec(GradCompression::SIGN);
  EXPECT_NE(dynamic_cast<SignCodec*>(MakeCodec(spec).get()), nullptr);
  spec.set_codec(GradCompression::TOP_K);
  EXPECT_NE(dynamic_cast<TopKCodec*>(MakeCodec(spec).get()), nullptr);
  spec.set_codec(GradCompression::INT8);
  EXPECT_NE(dynamic_cast<Int8Codec*>(MakeCodec(spec).get()), nullptr);
  spec.set_codec(GradCompression::INT4);
  EXPECT_NE(dynamic_cast<Int4Codec*>(MakeCodec(spec).get()), nullptr);
}

// 10 values in blocks of 8: two scales.
const std::vector<float> kValues = {1, -3, 0.5f, 2, -1, 4, -0.5f, 0, 6, -2};

// kValues encoded by `codec`; what the encoding left out goes to *left.
std::vector<char> Encoded(const ChunkCodec& codec, std::vector<float>* left) {
  *left = kValues;
  std::vector<char> out(codec.EncodedBytes(static_cast<int64_t>(left->size())));
  codec.Encode(static_cast<int64_t>(left->size()), left->data(), out.data());
  return out;
}

// `out` decodes, and with what the encoding left out gives kValues back
// (SIGN: to a rounding).
void ExpectDecodesBack(const ChunkCodec& codec, const std::vector<char>& out,
                       const std::vector<float>& left, bool exact) {
  std::vector<float> back(kValues.size());
  ASSERT_TRUE(codec.Decode(out.data(), static_cast<int64_t>(back.size()), back.data()).ok());
  for (size_t i = 0; i < back.size(); ++i) {
    if (exact) {
      EXPECT_EQ(back[i] + left[i], kValues[i]) << i;
    } else {
      EXPECT_FLOAT_EQ(back[i] + left[i], kValues[i]) << i;
    }
  }
}

TEST(ChunkCodecsTest, SignWritesScalesThenSignBits) {
  const SignCodec codec(8);
  ASSERT_EQ(codec.EncodedBytes(10), 2 * 4 + 2);
  std::vector<float> v;
  const std::vector<char> out = Encoded(codec, &v);
  EXPECT_FLOAT_EQ(FloatAt(out, 0), 12.0f / 8);          // mean |value| of the first block
  EXPECT_FLOAT_EQ(FloatAt(out, 4), 4.0f);               // of the second (6, -2)
  EXPECT_EQ(static_cast<uint8_t>(out[8]), 0b01010010);  // values 1, 4, 6 negative
  EXPECT_EQ(static_cast<uint8_t>(out[9]), 0b10);        // value 9 negative
  ExpectDecodesBack(codec, out, v, /*exact=*/false);
}

TEST(ChunkCodecsTest, TopKWritesAscendingIndicesThenValues) {
  const TopKCodec codec(0.25f);
  ASSERT_EQ(codec.Kept(10), 3);  // 2.5 rounded away from zero
  std::vector<float> v;
  const std::vector<char> out = Encoded(codec, &v);
  ASSERT_EQ(out.size(), 3u * 8);
  EXPECT_EQ(WordAt(out, 0), 1u);  // -3, 4, 6: the largest magnitudes, by index
  EXPECT_EQ(WordAt(out, 4), 5u);
  EXPECT_EQ(WordAt(out, 8), 8u);
  EXPECT_EQ(FloatAt(out, 12), -3.0f);
  EXPECT_EQ(FloatAt(out, 16), 4.0f);
  EXPECT_EQ(FloatAt(out, 20), 6.0f);
  EXPECT_EQ(v[1], 0.0f);  // kept values leave nothing; the others are kept whole
  EXPECT_EQ(v[3], 2.0f);
  ExpectDecodesBack(codec, out, v, /*exact=*/true);
}

TEST(ChunkCodecsTest, Int8WritesScalesThenOneLevelAByte) {
  const Int8Codec codec(8);
  ASSERT_EQ(codec.EncodedBytes(10), 2 * 4 + 10);
  std::vector<float> v;
  const std::vector<char> out = Encoded(codec, &v);
  EXPECT_FLOAT_EQ(FloatAt(out, 0), 4.0f / 127);  // the first block's max |value| / 127
  EXPECT_FLOAT_EQ(FloatAt(out, 4), 6.0f / 127);
  EXPECT_EQ(static_cast<int8_t>(out[8 + 5]), 127);  // 4: the block's largest
  EXPECT_EQ(static_cast<int8_t>(out[8 + 1]), -95);  // -3 x 127 / 4 = -95.25
  EXPECT_EQ(static_cast<int8_t>(out[8 + 8]), 127);
  EXPECT_EQ(static_cast<int8_t>(out[8 + 9]), -42);  // -2 x 127 / 6 = -42.3
  ExpectDecodesBack(codec, out, v, /*exact=*/true);
}

TEST(ChunkCodecsTest, Int4PacksTwoLevelsAByteLowNibbleFirst) {
  const Int4Codec codec(8);
  ASSERT_EQ(codec.EncodedBytes(10), 2 * 4 + 5);
  std::vector<float> v;
  const std::vector<char> out = Encoded(codec, &v);
  EXPECT_FLOAT_EQ(FloatAt(out, 0), 4.0f / 7);
  // Values 0 and 1: 1 x 7 / 4 = 1.75 -> 2, -3 x 7 / 4 = -5.25 -> -5 (0xB).
  EXPECT_EQ(static_cast<uint8_t>(out[8]), 0xB2);
  // Values 8 and 9: 6 -> 7, -2 x 7 / 6 = -2.33 -> -2 (0xE).
  EXPECT_EQ(static_cast<uint8_t>(out[12]), 0xE7);
  ExpectDecodesBack(codec, out, v, /*exact=*/true);
}

TEST(ChunkCodecsTest, NonFiniteEncodingsDecodeToNaN) {
  const SignCodec sign(8);
  const TopKCodec top_k(0.25f);
  const Int8Codec int8(8);
  const Int4Codec int4(8);
  for (const ChunkCodec* codec : std::vector<const ChunkCodec*>{&sign, &top_k, &int8, &int4}) {
    std::vector<char> out(codec->EncodedBytes(10));
    codec->EncodeNonFinite(10, out.data());
    std::vector<float> back(10);
    ASSERT_TRUE(codec->Decode(out.data(), 10, back.data()).ok());
    int nan = 0;
    for (float x : back) nan += std::isnan(x);
    EXPECT_GT(nan, 0);
  }
}

}  // namespace
}  // namespace pstrain
