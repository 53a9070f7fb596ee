#include "common/dtype.h"

#include <cmath>
#include <cstring>

#include "common/simd.h"

namespace pstrain {
namespace {

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

PSTRAIN_SIMD_CLONES
void EncodeBf16(const float* __restrict src, int64_t n, uint16_t* __restrict dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = FloatToBf16(src[i]);
}

PSTRAIN_SIMD_CLONES
void DecodeBf16(const uint16_t* __restrict src, int64_t n, float* __restrict dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToFloat(src[i]);
}

PSTRAIN_SIMD_CLONES
void EncodeHalf(const float* __restrict src, int64_t n, uint16_t* __restrict dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = FloatToHalf(src[i]);
}

PSTRAIN_SIMD_CLONES
void DecodeHalf(const uint16_t* __restrict src, int64_t n, float* __restrict dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = HalfToFloat(src[i]);
}

PSTRAIN_SIMD_CLONES
bool AllFiniteLoop(const float* __restrict v, int64_t n) {
  // Inf and NaN have every exponent bit set.
  uint32_t bad = 0;
#pragma omp simd reduction(| : bad)
  for (int64_t i = 0; i < n; ++i) bad |= ((Bits(v[i]) & 0x7F800000u) == 0x7F800000u);
  return bad == 0;
}

}  // namespace

int DTypeSize(DType dtype) { return dtype == FP32 ? 4 : 2; }

std::string DTypeName(DType dtype) {
  switch (dtype) {
    case FP32:
      return "fp32";
    case BF16:
      return "bf16";
    case FP16:
      return "fp16";
    default:
      return "unknown";
  }
}

bool ParseDType(const std::string& name, DType* dtype) {
  if (name == "fp32")
    *dtype = FP32;
  else if (name == "bf16")
    *dtype = BF16;
  else if (name == "fp16")
    *dtype = FP16;
  else
    return false;
  return true;
}

uint16_t FloatToBf16(float f) {
  const uint32_t u = Bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u)
    return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  // Round to nearest even on the 16 bits dropped; a carry into the exponent
  // is the right result (up to inf).
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

float Bf16ToFloat(uint16_t h) { return FromBits(static_cast<uint32_t>(h) << 16); }

uint16_t FloatToHalf(float f) {
  uint32_t u = Bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7FFFFFFFu;
  uint32_t h;
  if (u >= 0x47800000u) {  // >= 2^16: inf, or NaN (kept quiet)
    h = u > 0x7F800000u ? 0x7E00u : 0x7C00u;
  } else if (u < 0x38800000u) {  // below 2^-14: a subnormal or zero half
    // Adding 0.5 aligns the value's units of 2^-24 with the float's last
    // mantissa bit, so the FPU's round-to-nearest-even does the rounding.
    const float shifted = FromBits(u) + 0.5f;
    h = Bits(shifted) - 0x3F000000u;
  } else {
    // Rebias the exponent and round the 13 dropped bits to nearest even; a
    // carry past 65504 gives inf.
    const uint32_t odd = (u >> 13) & 1u;
    h = (u + 0xC8000FFFu + odd) >> 13;
  }
  return static_cast<uint16_t>(h | sign);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in fp32
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31) return FromBits(sign | 0x7F800000u | (mant << 13));
  return FromBits(sign | ((exp + 112u) << 23) | (mant << 13));
}

void EncodeFloats(DType dtype, const float* src, int64_t n, char* dst) {
  if (dtype == FP32) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  // 16-bit output: `dst` from a proto string or slice is 2-byte aligned in
  // practice; fall back to a bounce when it is not.
  if (reinterpret_cast<uintptr_t>(dst) % alignof(uint16_t) == 0) {
    auto* out = reinterpret_cast<uint16_t*>(dst);
    dtype == BF16 ? EncodeBf16(src, n, out) : EncodeHalf(src, n, out);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = dtype == BF16 ? FloatToBf16(src[i]) : FloatToHalf(src[i]);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}

void DecodeFloats(DType dtype, const char* src, int64_t n, float* dst) {
  if (dtype == FP32) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  if (reinterpret_cast<uintptr_t>(src) % alignof(uint16_t) == 0) {
    const auto* in = reinterpret_cast<const uint16_t*>(src);
    dtype == BF16 ? DecodeBf16(in, n, dst) : DecodeHalf(in, n, dst);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    dst[i] = dtype == BF16 ? Bf16ToFloat(h) : HalfToFloat(h);
  }
}

bool AllFinite(const float* v, int64_t n) { return AllFiniteLoop(v, n); }

}  // namespace pstrain
