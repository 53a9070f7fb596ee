#include "common/dtype.h"

#include <cmath>
#include <cstring>
#include <optional>

#include "common/enum_names.h"
#include "common/simd.h"

namespace pstrain {
namespace {

using half_internal::Bits;

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

std::string DTypeName(DType dtype) { return EnumWord(dtype); }

bool ParseDType(const std::string& name, DType* dtype) {
  // Lower case only, as before ("FP16" is refused).
  const std::optional<DType> parsed = ParseEnumWord<DType>(name);
  if (!parsed.has_value() || EnumWord(*parsed) != name) return false;
  *dtype = *parsed;
  return true;
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
