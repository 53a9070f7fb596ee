// The 16-bit conversions against independent references: GCC's _Float16
// for fp16 and a double-precision rounding for bf16, on every 16-bit value
// and on edge cases (ties, inf, NaN, subnormals, overflow).
#include "common/dtype.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// bf16 by hand: the two bf16 neighbours of f, and the nearer one (the even
// one on a tie).
uint16_t ReferenceBf16(float f) {
  if (std::isnan(f)) return 0x7FC0;
  const uint32_t u = Bits(f);
  const uint16_t down = static_cast<uint16_t>(u >> 16);
  const uint16_t up = static_cast<uint16_t>(down + 1);
  const double lo = Bf16ToFloat(down);
  // Past the largest finite bf16, IEEE rounding treats inf as 2^128.
  const double hi = (up & 0x7FFF) == 0x7F80 ? std::copysign(std::ldexp(1.0, 128), f)
                                            : static_cast<double>(Bf16ToFloat(up));
  if ((u & 0xFFFF) == 0) return down;
  const double dlo = std::fabs(static_cast<double>(f) - lo);
  const double dhi = std::fabs(hi - static_cast<double>(f));
  if (dlo < dhi) return down;
  if (dhi < dlo) return up;
  return (down & 1) ? up : down;
}

TEST(DTypeTest, Sizes) {
  EXPECT_EQ(DTypeSize(FP32), 4);
  EXPECT_EQ(DTypeSize(BF16), 2);
  EXPECT_EQ(DTypeSize(FP16), 2);
  DType d;
  EXPECT_TRUE(ParseDType("bf16", &d));
  EXPECT_EQ(d, BF16);
  EXPECT_FALSE(ParseDType("int8", &d));
}

TEST(DTypeTest, EveryHalfRoundTrips) {
#if defined(__FLT16_MANT_DIG__)  // the compiler has _Float16: the reference
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    uint16_t hb = static_cast<uint16_t>(h);
    _Float16 as_half;
    std::memcpy(&as_half, &hb, 2);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(static_cast<float>(as_half))) << h;
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f)))) << h;
      continue;
    }
    ASSERT_EQ(Bits(f), Bits(static_cast<float>(as_half))) << "half " << h;
    ASSERT_EQ(FloatToHalf(f), h) << "half " << h;
  }
#else
  GTEST_SKIP() << "this compiler has no _Float16 to compare with";
#endif
}

TEST(DTypeTest, EveryBf16RoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = Bf16ToFloat(static_cast<uint16_t>(h));
    ASSERT_EQ(Bits(f), h << 16);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(f))));
    } else {
      ASSERT_EQ(FloatToBf16(f), h);
    }
  }
}

// Random floats over the whole range and near the interesting boundaries.
std::vector<float> Samples() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          65504.0f,
                          65519.99f,
                          65520.0f,
                          65536.0f,
                          1e10f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::denorm_min(),
                          5.96e-8f,
                          2.98e-8f,
                          2.99e-8f,
                          6.1e-5f,
                          6.0e-5f,
                          1.0009765625f,
                          1.00048828125f,
                          1.00146484375f,
                          3.4028235e38f};
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 200000; ++i) v.push_back(FromBits(any(rng)));
  std::uniform_real_distribution<float> small(-1e-4f, 1e-4f), mid(-70000.0f, 70000.0f);
  for (int i = 0; i < 200000; ++i) {
    v.push_back(small(rng));
    v.push_back(mid(rng));
  }
  return v;
}

TEST(DTypeTest, HalfMatchesCompilerConversion) {
#if defined(__FLT16_MANT_DIG__)  // the compiler has _Float16: the reference
  for (float f : Samples()) {
    const _Float16 ref = static_cast<_Float16>(f);
    uint16_t ref_bits;
    std::memcpy(&ref_bits, &ref, 2);
    const uint16_t got = FloatToHalf(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(got)));
      continue;
    }
    ASSERT_EQ(got, ref_bits) << "f=" << f << " bits=" << std::hex << Bits(f);
  }
#else
  GTEST_SKIP() << "this compiler has no _Float16 to compare with";
#endif
}

TEST(DTypeTest, Bf16MatchesReferenceRounding) {
  for (float f : Samples()) {
    const uint16_t got = FloatToBf16(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(Bf16ToFloat(got)));
      continue;
    }
    ASSERT_EQ(got, ReferenceBf16(f)) << "f=" << f << " bits=" << std::hex << Bits(f);
  }
}

TEST(DTypeTest, TiesGoToEven) {
  // 1 + 2^-8 lies halfway between bf16 1.0 (even) and 1 + 2^-7.
  EXPECT_EQ(FloatToBf16(1.00390625f), FloatToBf16(1.0f));
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.01171875f)), 1.015625f);
  // fp16: 1 + 2^-11 is halfway between 1.0 and 1 + 2^-10: goes to 1.0.
  EXPECT_EQ(HalfToFloat(FloatToHalf(1.00048828125f)), 1.0f);
  EXPECT_EQ(HalfToFloat(FloatToHalf(65520.0f)), std::numeric_limits<float>::infinity());
  EXPECT_EQ(HalfToFloat(FloatToHalf(65519.0f)), 65504.0f);
  // The smallest fp16 subnormal, 2^-24, and half of it (a tie, to zero).
  EXPECT_EQ(HalfToFloat(FloatToHalf(5.9604644775390625e-8f)), 5.9604644775390625e-8f);
  EXPECT_EQ(HalfToFloat(FloatToHalf(2.98023223876953125e-8f)), 0.0f);
}

TEST(DTypeTest, BulkMatchesScalarAtAnyAlignment) {
  const std::vector<float> v = Samples();
  const int64_t n = 1001;
  for (DType d : {FP32, BF16, FP16}) {
    for (int offset : {0, 1}) {
      std::vector<char> buf(n * DTypeSize(d) + 1);
      EncodeFloats(d, v.data() + 50, n, buf.data() + offset);
      std::vector<float> back(n);
      DecodeFloats(d, buf.data() + offset, n, back.data());
      for (int64_t i = 0; i < n; ++i) {
        const float x = v[50 + i];
        const float want = d == FP32   ? x
                           : d == BF16 ? Bf16ToFloat(FloatToBf16(x))
                                       : HalfToFloat(FloatToHalf(x));
        if (std::isnan(want)) {
          ASSERT_TRUE(std::isnan(back[i]));
        } else {
          ASSERT_EQ(Bits(back[i]), Bits(want)) << DTypeName(d) << " i=" << i;
        }
      }
    }
  }
}

TEST(DTypeTest, AllFinite) {
  std::vector<float> v(1000, 1.0f);
  EXPECT_TRUE(AllFinite(v.data(), v.size()));
  v[777] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(AllFinite(v.data(), v.size()));
  v[777] = -std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(AllFinite(v.data(), v.size()));
  v[777] = std::numeric_limits<float>::max();
  EXPECT_TRUE(AllFinite(v.data(), v.size()));
}

}  // namespace
}  // namespace pstrain
