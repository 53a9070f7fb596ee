#include "common/level_codecs.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/simd.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

// The largest |v| of [begin, end), in 8 lanes (so that it vectorizes).
PSTRAIN_SIMD_CLONES float MaxMagnitude(const float* v, int64_t begin, int64_t end) {
  float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    for (int k = 0; k < 8; ++k) {
      const float m = std::fabs(v[i + k]);
      lanes[k] = m > lanes[k] ? m : lanes[k];
    }
  }
  float max = 0;
  for (; i < end; ++i) max = std::max(max, std::fabs(v[i]));
  for (float lane : lanes) max = std::max(max, lane);
  return max;
}

// Each v[i] of [begin, end) as the nearest of -levels..levels times
// `scale` (ties away from zero): q[i - begin] gets the level, and v[i]
// what the level leaves out, v[i] - level x scale (as Decode computes it).
PSTRAIN_SIMD_CLONES void QuantizeBlock(float* __restrict v, int64_t begin, int64_t end, int levels,
                                       float scale, int8_t* __restrict q) {
  const float inverse = scale > 0 ? 1.0f / scale : 0.0f;
  const float top = static_cast<float>(levels);
  for (int64_t i = begin; i < end; ++i) {
    const float x = v[i] * inverse;
    const float rounded = std::clamp(x + (x < 0 ? -0.5f : 0.5f), -top, top);
    const int level = static_cast<int>(rounded);  // truncation: round half away from zero
    q[i - begin] = static_cast<int8_t>(level);
    v[i] -= static_cast<float>(level) * scale;
  }
}

// Levels -7..7 two to a byte, the even one's in the low nibble; an odd
// count's last high nibble 0.
PSTRAIN_SIMD_CLONES void PackNibbles(const int8_t* __restrict q, int64_t n,
                                     uint8_t* __restrict out) {
  int64_t i = 0;
  for (; i + 2 <= n; i += 2) {
    out[i >> 1] = static_cast<uint8_t>((q[i] & 0xF) | ((q[i + 1] & 0xF) << 4));
  }
  if (i < n) out[i >> 1] = static_cast<uint8_t>(q[i] & 0xF);
}

// Byte by byte, so that they vectorize.
PSTRAIN_SIMD_CLONES bool HasInt8BadLevel(const uint8_t* data, int64_t n) {
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad |= static_cast<uint32_t>(data[i] == 0x80);
  return bad != 0;
}

PSTRAIN_SIMD_CLONES bool HasInt4BadLevel(const uint8_t* data, int64_t n) {
  uint32_t bad = 0;
  const int64_t bytes = (n + 1) / 2;
  for (int64_t i = 0; i < bytes; ++i) {
    bad |=
        static_cast<uint32_t>((data[i] & 0xF) == 0x8) | static_cast<uint32_t>(data[i] >> 4 == 0x8);
  }
  return bad != 0 || ((n & 1) && (data[bytes - 1] >> 4) != 0);
}

// Values [begin, end) of a block of `scale`, from their levels at `data`.
PSTRAIN_SIMD_CLONES void DecodeInt8Block(const int8_t* data, int64_t begin, int64_t end,
                                         float scale, float* out) {
  for (int64_t i = begin; i < end; ++i) out[i] = static_cast<float>(data[i]) * scale;
}

PSTRAIN_SIMD_CLONES void DecodeInt4Block(const uint8_t* data, int64_t begin, int64_t end,
                                         float scale, float* out) {
  int64_t i = begin;  // a block starts on a byte
  for (; i + 2 <= end; i += 2) {
    const uint8_t byte = data[i >> 1];
    out[i] = static_cast<float>(static_cast<int8_t>(byte << 4) >> 4) * scale;
    out[i + 1] = static_cast<float>(static_cast<int8_t>(byte) >> 4) * scale;
  }
  if (i < end) out[i] = static_cast<float>(static_cast<int8_t>(data[i >> 1] << 4) >> 4) * scale;
}

}  // namespace

void LevelCodec::Encode(int64_t n, float* v, char* out) const {
  const int64_t blocks = Blocks(n);
  char* data = out + 4 * blocks;
  thread_local std::vector<int8_t> q;
  q.resize(block());
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * block(), end = std::min(n, begin + block());
    float scale = MaxMagnitude(v, begin, end) / static_cast<float>(levels_);
    if (scale < std::numeric_limits<float>::min()) scale = 0;  // 1 / scale stays finite
    // max / 127 of a max at float's largest rounds up, and 127 x scale
    // would overflow: one step down keeps every level's value finite.
    if (std::isinf(static_cast<float>(levels_) * scale)) scale = std::nextafter(scale, 0.0f);
    std::memcpy(out + 4 * b, &scale, 4);
    QuantizeBlock(v, begin, end, levels_, scale, q.data());
    WriteLevels(q.data(), end - begin, begin, data);
  }
}

absl::Status LevelCodec::Decode(const char* bytes, int64_t numel, float* out) const {
  RETURN_IF_ERROR(CheckScales(bytes, numel));
  const int64_t blocks = Blocks(numel);
  const char* data = bytes + 4 * blocks;
  if (HasBadLevel(reinterpret_cast<const uint8_t*>(data), numel)) {
    return absl::InvalidArgumentError(
        "a compressed chunk holds a level the encoder writes none of (-128 in INT8, -8 in "
        "INT4, or INT4's unused last nibble set)");
  }
  for (int64_t b = 0; b < blocks; ++b) {
    float scale;
    std::memcpy(&scale, bytes + 4 * b, 4);
    const int64_t begin = b * block(), end = std::min(numel, begin + block());
    DecodeBlock(data, begin, end, scale, out);
  }
  return absl::OkStatus();
}

void Int8Codec::WriteLevels(const int8_t* q, int64_t n, int64_t begin, char* data) const {
  std::memcpy(data + begin, q, n);
}

bool Int8Codec::HasBadLevel(const uint8_t* data, int64_t n) const {
  return HasInt8BadLevel(data, n);
}

void Int8Codec::DecodeBlock(const char* data, int64_t begin, int64_t end, float scale,
                            float* out) const {
  DecodeInt8Block(reinterpret_cast<const int8_t*>(data), begin, end, scale, out);
}

void Int4Codec::WriteLevels(const int8_t* q, int64_t n, int64_t begin, char* data) const {
  PackNibbles(q, n, reinterpret_cast<uint8_t*>(data + begin / 2));
}

bool Int4Codec::HasBadLevel(const uint8_t* data, int64_t n) const {
  return HasInt4BadLevel(data, n);
}

void Int4Codec::DecodeBlock(const char* data, int64_t begin, int64_t end, float scale,
                            float* out) const {
  DecodeInt4Block(reinterpret_cast<const uint8_t*>(data), begin, end, scale, out);
}

}  // namespace pstrain
