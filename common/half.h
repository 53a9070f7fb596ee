// 16-bit floating-point conversions (bf16 and IEEE fp16), with no
// dependency on the job spec: the kernels use them, and common/dtype.h
// builds the wire encodings on them. Conversions to 16 bits round to
// nearest even, keep inf and NaN (NaN stays NaN), and handle subnormals;
// values beyond fp16's range become inf. Inline, so that loops over them
// vectorise.
#ifndef PSTRAIN_COMMON_HALF_H_
#define PSTRAIN_COMMON_HALF_H_

#include <cstdint>
#include <cstring>

namespace pstrain {
namespace half_internal {

inline uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

}  // namespace half_internal

inline uint16_t FloatToBf16(float f) {
  const uint32_t u = half_internal::Bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u)
    return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  // Round to nearest even on the 16 bits dropped; a carry into the exponent
  // is the right result (up to inf).
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

inline float Bf16ToFloat(uint16_t h) {
  return half_internal::FromBits(static_cast<uint32_t>(h) << 16);
}

inline uint16_t FloatToHalf(float f) {
  uint32_t u = half_internal::Bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7FFFFFFFu;
  uint32_t h;
  if (u >= 0x47800000u) {  // >= 2^16: inf, or NaN (kept quiet)
    h = u > 0x7F800000u ? 0x7E00u : 0x7C00u;
  } else if (u < 0x38800000u) {  // below 2^-14: a subnormal or zero half
    // Adding 0.5 aligns the value's units of 2^-24 with the float's last
    // mantissa bit, so the FPU's round-to-nearest-even does the rounding.
    const float shifted = half_internal::FromBits(u) + 0.5f;
    h = half_internal::Bits(shifted) - 0x3F000000u;
  } else {
    // Rebias the exponent and round the 13 dropped bits to nearest even; a
    // carry past 65504 gives inf.
    const uint32_t odd = (u >> 13) & 1u;
    h = (u + 0xC8000FFFu + odd) >> 13;
  }
  return static_cast<uint16_t>(h | sign);
}

inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in fp32
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31) return half_internal::FromBits(sign | 0x7F800000u | (mant << 13));
  return half_internal::FromBits(sign | ((exp + 112u) << 23) | (mant << 13));
}

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_HALF_H_
