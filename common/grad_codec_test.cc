// The codecs against plain references (a full sort for top-k, a
// block-by-block mean for the scaled sign, block maxima for INT8 and INT4),
// error feedback's identity
// (decoded + residual = what was compressed), the residual staying bounded
// over many clocks, and the decoder refusing malformed payloads.
#include "common/grad_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

GradCompression Spec(GradCompression::Codec codec) {
  GradCompression spec;
  spec.set_codec(codec);
  return WithCompressionDefaults(spec);
}

constexpr GradCompression::Codec kCodecs[] = {GradCompression::SIGN, GradCompression::TOP_K,
                                              GradCompression::INT8, GradCompression::INT4};

std::vector<float> Gaussian(int64_t n, std::mt19937* rng, float sigma = 1.0f) {
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = d(*rng);
  return v;
}

// Encodes `g` with `residual`, decodes; returns the decoded values.
std::vector<float> RoundTrip(const GradCompression& spec, const std::vector<float>& g,
                             std::vector<float>* residual) {
  const int64_t n = static_cast<int64_t>(g.size());
  std::vector<char> bytes(EncodedBytes(spec, n));
  EncodeWithFeedback(spec, g.data(), n, residual->data(), bytes.data());
  std::vector<float> decoded(n);
  EXPECT_TRUE(
      Decode(spec, bytes.data(), static_cast<int64_t>(bytes.size()), n, decoded.data()).ok());
  return decoded;
}

TEST(GradCodecTest, SizesFollowTheFormat) {
  EXPECT_EQ(EncodedBytes(Spec(GradCompression::SIGN), 65536), 4 * 256 + 8192);
  EXPECT_EQ(EncodedBytes(Spec(GradCompression::SIGN), 1000), 4 * 4 + 125);
  EXPECT_EQ(KeptValues(Spec(GradCompression::TOP_K), 65536), 6554);  // 6553.6 rounded
  EXPECT_EQ(EncodedBytes(Spec(GradCompression::TOP_K), 65536), 8 * 6554);
  EXPECT_EQ(KeptValues(Spec(GradCompression::TOP_K), 4), 1);
  EXPECT_FALSE(Compresses(Spec(GradCompression::TOP_K), 4095));
  EXPECT_TRUE(Compresses(Spec(GradCompression::TOP_K), 4096));
  EXPECT_FALSE(Compresses(Spec(GradCompression::NONE), 1 << 20));
  // A chunk goes compressed only when that takes fewer bytes than fp32.
  GradCompression tiny = Spec(GradCompression::SIGN);
  tiny.set_min_numel(1);
  EXPECT_FALSE(Compresses(tiny, 1));  // 4 + 1 bytes against 4
  EXPECT_TRUE(Compresses(tiny, 2));   // 4 + 1 against 8
  tiny = Spec(GradCompression::TOP_K);
  tiny.set_min_numel(1);
  tiny.set_ratio(0.49f);
  EXPECT_FALSE(Compresses(tiny, 1));   // 1 value kept: 8 bytes against 4
  EXPECT_TRUE(Compresses(tiny, 100));  // 49 kept: 392 against 400
  EXPECT_EQ(KeptValues(tiny, 0), 0);
  EXPECT_EQ(EncodedBytes(Spec(GradCompression::INT8), 1000), 4 * 4 + 1000);
  EXPECT_EQ(EncodedBytes(Spec(GradCompression::INT4), 1001), 4 * 4 + 501);
}

// INT8 and INT4 against a reference: each block's scale its max |value| /
// levels, each value the nearest level (ties away from zero) times it.
TEST(GradCodecTest, LevelsMatchBlockMaxima) {
  for (const auto& [codec, levels] :
       {std::pair{GradCompression::INT8, 127}, std::pair{GradCompression::INT4, 7}}) {
    std::mt19937 rng(5);
    GradCompression spec = Spec(codec);
    spec.set_block(64);
    const std::vector<float> g = Gaussian(1001, &rng);  // odd, and a short last block
    std::vector<float> residual(g.size(), 0.0f);
    const std::vector<float> decoded = RoundTrip(spec, g, &residual);
    for (size_t begin = 0; begin < g.size(); begin += 64) {
      const size_t end = std::min(g.size(), begin + 64);
      float max = 0;
      for (size_t i = begin; i < end; ++i) max = std::max(max, std::fabs(g[i]));
      const float scale = max / static_cast<float>(levels);
      for (size_t i = begin; i < end; ++i) {
        const float level = std::round(g[i] / scale);  // std::round: ties away from zero
        ASSERT_LE(std::fabs(level), levels) << i;
        ASSERT_NEAR(decoded[i], level * scale, 1e-6f * max) << "codec " << codec << " " << i;
        ASSERT_LE(std::fabs(residual[i]), 0.5f * scale * (1 + 1e-4f)) << i;
      }
    }
  }
}

TEST(GradCodecTest, SignMatchesBlockMeansOfTheMagnitudes) {
  std::mt19937 rng(1);
  GradCompression spec = Spec(GradCompression::SIGN);
  spec.set_block(64);
  const std::vector<float> g = Gaussian(1000, &rng);  // a short last block
  std::vector<float> residual(g.size(), 0.0f);
  const std::vector<float> decoded = RoundTrip(spec, g, &residual);
  for (size_t begin = 0; begin < g.size(); begin += 64) {
    const size_t end = std::min(g.size(), begin + 64);
    double sum = 0;
    for (size_t i = begin; i < end; ++i) sum += std::fabs(g[i]);
    const double scale = sum / static_cast<double>(end - begin);
    const float magnitude = std::fabs(decoded[begin]);  // one a block
    ASSERT_NEAR(magnitude, scale, 1e-6 * scale) << begin;
    for (size_t i = begin; i < end; ++i) {
      ASSERT_EQ(decoded[i], g[i] < 0 ? -magnitude : magnitude) << i;
      ASSERT_EQ(residual[i], g[i] - decoded[i]) << i;
    }
  }
}

TEST(GradCodecTest, TopKKeepsTheLargestMagnitudesLowerIndexOnTies) {
  GradCompression spec = Spec(GradCompression::TOP_K);
  spec.set_ratio(0.3f);  // 3 of 10
  const std::vector<float> g = {0.5f, -2.0f, 1.0f, 1.0f, -1.0f, 0.0f, 3.0f, 0.1f, -0.2f, 0.3f};
  std::vector<float> residual(g.size(), 0.0f);
  const std::vector<float> decoded = RoundTrip(spec, g, &residual);
  const std::vector<float> want = {0, -2.0f, 1.0f, 0, 0, 0, 3.0f, 0, 0, 0};
  EXPECT_EQ(decoded, want);
  for (size_t i = 0; i < g.size(); ++i) EXPECT_EQ(residual[i], g[i] - want[i]) << i;
}

TEST(GradCodecTest, TopKAgreesWithAFullSort) {
  std::mt19937 rng(2);
  const GradCompression spec = Spec(GradCompression::TOP_K);
  const std::vector<float> g = Gaussian(50000, &rng);
  std::vector<float> residual(g.size(), 0.0f);
  const std::vector<float> decoded = RoundTrip(spec, g, &residual);
  std::vector<int> order(g.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return std::fabs(g[a]) > std::fabs(g[b]); });
  std::vector<float> want(g.size(), 0.0f);
  for (int64_t i = 0; i < KeptValues(spec, 50000); ++i) want[order[i]] = g[order[i]];
  EXPECT_EQ(decoded, want);
}

// Each clock: decoded + new residual == g + old residual, bit for bit for
// top-k, INT8 and INT4, to a rounding for the sign; over the run, the decoded gradients
// plus the last residual sum to the true ones.
TEST(GradCodecTest, ErrorFeedbackLosesNothing) {
  for (const auto codec : kCodecs) {
    std::mt19937 rng(3);
    const GradCompression spec = Spec(codec);
    const int64_t n = 5000;
    std::vector<float> residual(n, 0.0f);
    std::vector<double> truth(n, 0.0), sent(n, 0.0);
    for (int clock = 0; clock < 200; ++clock) {
      const std::vector<float> g = Gaussian(n, &rng);
      const std::vector<float> before = residual;
      const std::vector<float> decoded = RoundTrip(spec, g, &residual);
      for (int64_t i = 0; i < n; ++i) {
        const float v = g[i] + before[i];
        if (codec != GradCompression::SIGN) {
          ASSERT_EQ(decoded[i] + residual[i], v) << "codec " << codec << " value " << i;
        } else {
          ASSERT_NEAR(decoded[i] + residual[i], v, 1e-6f * std::max(1.0f, std::fabs(v))) << i;
        }
        truth[i] += g[i];
        sent[i] += decoded[i];
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(sent[i] + residual[i], truth[i], 1e-3) << "codec " << codec << " value " << i;
    }
  }
}

double Norm(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s);
}

// The residual settles: over 3,000 clocks of fresh gradients its norm stays
// within a fixed multiple of a gradient's, and does not grow from the
// second thousand clocks to the third.
TEST(GradCodecTest, ResidualStaysBounded) {
  for (const auto codec : kCodecs) {
    std::mt19937 rng(4);
    const GradCompression spec = Spec(codec);
    const int64_t n = 8192;
    std::vector<float> residual(n, 0.0f);
    double grad_norm = 0, middle = 0, last = 0;
    for (int clock = 0; clock < 3000; ++clock) {
      const std::vector<float> g = Gaussian(n, &rng);
      grad_norm = std::max(grad_norm, Norm(g));
      RoundTrip(spec, g, &residual);
      const double r = Norm(residual);
      // top-k keeps 10 %: a value may wait tens of clocks, its residual
      // growing like a random walk's meanwhile.
      ASSERT_LT(r, 20 * grad_norm) << "codec " << codec << " clock " << clock;
      if (clock >= 1000 && clock < 2000) middle = std::max(middle, r);
      if (clock >= 2000) last = std::max(last, r);
    }
    EXPECT_LT(last, 1.2 * middle) << "codec " << codec;
  }
}

TEST(GradCodecTest, NonFiniteGradientDecodesNonFiniteAndKeepsTheResidual) {
  for (const auto codec : kCodecs) {
    const GradCompression spec = Spec(codec);
    std::vector<float> g(5000, 1.0f), residual(5000, 0.25f);
    g[17] = std::numeric_limits<float>::infinity();
    const std::vector<float> decoded = RoundTrip(spec, g, &residual);
    EXPECT_TRUE(std::any_of(decoded.begin(), decoded.end(), [](float x) { return std::isnan(x); }));
    EXPECT_EQ(residual, std::vector<float>(5000, 0.25f));
  }
}

// Values near float's largest: a block's scale (a SIGN block's mean,
// summed in double; an INT block's max / levels) and the residuals stay
// finite.
TEST(GradCodecTest, HugeValuesKeepAFiniteScaleAndResidual) {
  for (const auto codec : {GradCompression::SIGN, GradCompression::INT8, GradCompression::INT4}) {
    const GradCompression spec = Spec(codec);
    std::vector<float> g(512, 3e38f), residual(512, 0.0f);
    for (size_t i = 0; i < g.size(); i += 2) g[i] = -3.3e38f;
    const std::vector<float> decoded = RoundTrip(spec, g, &residual);
    for (size_t i = 0; i < g.size(); ++i) {
      ASSERT_TRUE(std::isfinite(decoded[i]) && std::isfinite(residual[i])) << i;
      ASSERT_EQ(decoded[i] < 0, g[i] < 0) << "codec " << codec << " " << i;
    }
  }
}

// Ties round away from zero: a block whose max is 127 has scale 1 (INT8).
TEST(GradCodecTest, LevelTiesRoundAwayFromZero) {
  const GradCompression spec = Spec(GradCompression::INT8);
  std::vector<float> g(256, 0.0f), residual(256, 0.0f);
  const std::vector<float> ties = {127.0f, 0.5f, -0.5f, 1.5f, -2.5f, 126.5f};
  std::copy(ties.begin(), ties.end(), g.begin());
  const std::vector<float> decoded = RoundTrip(spec, g, &residual);
  const std::vector<float> want = {127.0f, 1.0f, -1.0f, 2.0f, -3.0f, 127.0f};
  EXPECT_EQ(std::vector<float>(decoded.begin(), decoded.begin() + 6), want);
}

// A block at float's largest: max / 127 rounds up, so the scale steps down
// and 127 x scale stays finite.
TEST(GradCodecTest, LargestFloatKeepsLevelsFinite) {
  const float max = std::numeric_limits<float>::max();
  for (const auto codec : {GradCompression::INT8, GradCompression::INT4}) {
    const GradCompression spec = Spec(codec);
    std::vector<float> g(256, 1.0f), residual(256, 0.0f);
    g[0] = max;
    g[1] = -max;
    const std::vector<float> decoded = RoundTrip(spec, g, &residual);
    for (size_t i = 0; i < g.size(); ++i) {
      ASSERT_TRUE(std::isfinite(decoded[i]) && std::isfinite(residual[i])) << codec << " " << i;
      ASSERT_EQ(decoded[i] + residual[i], g[i]) << codec << " " << i;
    }
  }
}

// Values too small for a normal scale: an INT block sends zeros and keeps
// them whole in the residual (no NaN from 1 / scale).
TEST(GradCodecTest, TinyValuesWaitInTheResidual) {
  for (const auto codec : {GradCompression::INT8, GradCompression::INT4}) {
    const GradCompression spec = Spec(codec);
    std::vector<float> g(512, 1e-40f), residual(512, 0.0f);
    g[3] = 0.0f;
    const std::vector<float> decoded = RoundTrip(spec, g, &residual);
    EXPECT_EQ(decoded, std::vector<float>(512, 0.0f));
    EXPECT_EQ(residual, g);
  }
}

TEST(GradCodecTest, DecoderRefusesMalformedPayloads) {
  const GradCompression sign = Spec(GradCompression::SIGN);
  GradCompression topk = Spec(GradCompression::TOP_K);
  topk.set_ratio(0.01f);
  std::vector<float> out(1000);
  std::vector<char> bytes(EncodedBytes(sign, 1000) + 1);
  EXPECT_FALSE(
      Decode(sign, bytes.data(), static_cast<int64_t>(bytes.size()), 1000, out.data()).ok());
  // k = 10 indices: out of range, then repeated.
  std::vector<uint32_t> words(20, 0);
  for (uint32_t i = 0; i < 10; ++i) words[i] = i;
  words[9] = 1000;
  const int64_t size = EncodedBytes(topk, 1000);
  ASSERT_EQ(size, 80);
  EXPECT_FALSE(
      Decode(topk, reinterpret_cast<const char*>(words.data()), size, 1000, out.data()).ok());
  words[9] = 8;
  EXPECT_FALSE(
      Decode(topk, reinterpret_cast<const char*>(words.data()), size, 1000, out.data()).ok());
  words[9] = 999;
  EXPECT_TRUE(
      Decode(topk, reinterpret_cast<const char*>(words.data()), size, 1000, out.data()).ok());
}

// INT8 and INT4: a level below -levels (the encoder writes none), INT4's
// unused last nibble set, a negative scale.
TEST(GradCodecTest, DecoderRefusesMalformedLevels) {
  std::vector<float> out(1001);
  const GradCompression int8 = Spec(GradCompression::INT8), int4 = Spec(GradCompression::INT4);
  std::vector<char> bytes(EncodedBytes(int8, 1001), 0);
  const float one = 1.0f, minus = -1.0f;
  for (int b = 0; b < 4; ++b) std::memcpy(bytes.data() + 4 * b, &one, 4);  // 4 blocks of 256
  auto decodes = [&](const GradCompression& spec) {
    return Decode(spec, bytes.data(), EncodedBytes(spec, 1001), 1001, out.data()).ok();
  };
  EXPECT_TRUE(decodes(int8));
  bytes[16 + 500] = static_cast<char>(-128);
  EXPECT_FALSE(decodes(int8));
  bytes[16 + 500] = static_cast<char>(-127);
  EXPECT_TRUE(decodes(int8));
  EXPECT_EQ(out[500], -127.0f);
  std::fill(bytes.begin() + 16, bytes.end(), 0);
  EXPECT_TRUE(decodes(int4));
  bytes[16 + 7] = static_cast<char>(0x80);  // value 15: -8
  EXPECT_FALSE(decodes(int4));
  bytes[16 + 7] = static_cast<char>(0x08);  // value 14: -8
  EXPECT_FALSE(decodes(int4));
  bytes[16 + 7] = static_cast<char>(0x97);  // values 14, 15: 7, -7
  EXPECT_TRUE(decodes(int4));
  EXPECT_EQ(out[14], 7.0f);
  EXPECT_EQ(out[15], -7.0f);
  bytes[16 + 500] = 0x10;  // value 1001, past the end
  EXPECT_FALSE(decodes(int4));
  bytes[16 + 500] = 0;
  std::memcpy(bytes.data() + 4, &minus, 4);
  EXPECT_FALSE(decodes(int4));
}

TEST(GradCodecTest, ChecksItsRanges) {
  GradCompression spec = Spec(GradCompression::TOP_K);
  EXPECT_TRUE(CheckCompression(spec).ok());
  spec.set_ratio(0.5f);  // would save no byte
  EXPECT_EQ(CheckCompression(spec).code(), absl::StatusCode::kInvalidArgument);
  spec = Spec(GradCompression::SIGN);
  spec.set_block(4);
  EXPECT_EQ(CheckCompression(spec).code(), absl::StatusCode::kInvalidArgument);
  spec = Spec(GradCompression::SIGN);
  spec.set_min_numel(0);
  EXPECT_EQ(CheckCompression(spec).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pstrain
