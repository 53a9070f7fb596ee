#include "common/grad_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/simd.h"

namespace pstrain {
namespace {

constexpr float kDefaultRatio = 0.1f;
constexpr int32_t kDefaultBlock = 256;
constexpr int64_t kDefaultMinNumel = 4096;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// v = values + residual; whether every value of it is finite.
PSTRAIN_SIMD_CLONES bool SumFinite(const float* __restrict values, const float* __restrict residual,
                                   int64_t n, float* __restrict v) {
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    v[i] = values[i] + residual[i];
    bad |= static_cast<uint32_t>((Bits(v[i]) & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

// An encoding that decodes to NaN everywhere it decodes to anything: the
// server then counts the push as non-finite (and skips it, as it would the
// dense gradient).
void EncodeNonFinite(const GradCompression& spec, int64_t n, char* out) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (spec.codec() != GradCompression::TOP_K) {  // NaN scales, and whatever follows zero
    const int64_t blocks = CeilDiv(n, spec.block());
    for (int64_t b = 0; b < blocks; ++b) std::memcpy(out + 4 * b, &nan, 4);
    std::memset(out + 4 * blocks, 0, EncodedBytes(spec, n) - 4 * blocks);
    return;
  }
  const int64_t k = KeptValues(spec, n);
  for (int64_t i = 0; i < k; ++i) {
    const uint32_t index = static_cast<uint32_t>(i);
    std::memcpy(out + 4 * i, &index, 4);
    std::memcpy(out + 4 * (k + i), &nan, 4);
  }
}

// The mean |v| of [begin, end), summed in 8 lanes (so that it vectorizes).
PSTRAIN_SIMD_CLONES float MeanMagnitude(const float* v, int64_t begin, int64_t end) {
  double lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // no overflow short of 2^1024
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    for (int k = 0; k < 8; ++k) lanes[k] += std::fabs(v[i + k]);
  }
  double sum = 0;
  for (; i < end; ++i) sum += std::fabs(v[i]);
  for (double lane : lanes) sum += lane;
  return static_cast<float>(sum / static_cast<double>(end - begin));
}

// `v` holds values + residual on entry and v - decode on return. A block
// starts on a byte of signs (block % 8 == 0). A scale is a mean of
// magnitudes (summed in double), so it never exceeds the largest of them,
// and neither does a residual, | |v| - scale |.
PSTRAIN_SIMD_CLONES void EncodeSign(int64_t block, int64_t n, float* v, char* out) {
  const int64_t blocks = CeilDiv(n, block);
  unsigned char* bits = reinterpret_cast<unsigned char*>(out + 4 * blocks);
  std::memset(bits, 0, CeilDiv(n, 8));
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * block, end = std::min(n, begin + block);
    const float scale = MeanMagnitude(v, begin, end);
    std::memcpy(out + 4 * b, &scale, 4);
    for (int64_t i = begin; i < end; i += 8) {
      unsigned byte = 0;
      const int lanes = static_cast<int>(std::min<int64_t>(8, end - i));
      for (int k = 0; k < lanes; ++k) {
        const bool negative = v[i + k] < 0;
        byte |= static_cast<unsigned>(negative) << k;
        v[i + k] -= negative ? -scale : scale;
      }
      bits[i >> 3] = static_cast<unsigned char>(byte);
    }
  }
}

// flags[i] = |v[i]| >= floor; returns how many.
PSTRAIN_SIMD_CLONES int64_t FlagAtLeast(const float* __restrict v, int64_t n, float floor,
                                        uint8_t* __restrict flags) {
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    flags[i] = std::fabs(v[i]) >= floor;
    count += flags[i];
  }
  return count;
}

// Calls f(i) for each i with flags[i] set, ascending; 8 flags a load, so
// that sparse flags cost little.
template <typename F>
void ForEachFlagged(const uint8_t* flags, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t word;
    std::memcpy(&word, flags + i, 8);
    while (word != 0) {
      const int byte = __builtin_ctzll(word) / 8;
      f(i + byte);
      word &= ~(0xFFull << (8 * byte));
    }
  }
  for (; i < n; ++i) {
    if (flags[i]) f(i);
  }
}

// The k-th largest |v|, found among the values at or above a floor that a
// sample suggests (about 1.5 k of them) -- or, should the sample mislead,
// among all.
float KthMagnitude(const float* v, int64_t n, int64_t k, std::vector<uint8_t>* flags) {
  thread_local std::vector<float> picked;
  picked.clear();
  if (n >= 4096) {
    const int64_t samples = 1024, stride = n / samples;
    for (int64_t i = 0; i < samples; ++i) picked.push_back(std::fabs(v[i * stride]));
    // The sample's value with about 1.5 k / n of the sample above it.
    const int64_t rank = std::min<int64_t>(samples - 1, (3 * k * samples) / (2 * n) + 8);
    std::nth_element(picked.begin(), picked.begin() + rank, picked.end(), std::greater<float>());
    const float floor = picked[rank];
    picked.clear();
    if (FlagAtLeast(v, n, floor, flags->data()) >= k) {
      ForEachFlagged(flags->data(), n, [&](int64_t i) { picked.push_back(std::fabs(v[i])); });
    }
  }
  if (picked.empty()) {
    for (int64_t i = 0; i < n; ++i) picked.push_back(std::fabs(v[i]));
  }
  std::nth_element(picked.begin(), picked.begin() + (k - 1), picked.end(), std::greater<float>());
  return picked[k - 1];
}

// `v` as in EncodeSign. The k values of largest magnitude (ties: the lower
// index first), in index order.
void EncodeTopK(int64_t k, int64_t n, float* v, char* out) {
  thread_local std::vector<uint8_t> flags;
  flags.resize(n);
  const float threshold = KthMagnitude(v, n, k, &flags);
  // Every value above the threshold, then the first ones equal to it.
  const int64_t at_least = FlagAtLeast(v, n, threshold, flags.data());
  int64_t equal = 0;
  ForEachFlagged(flags.data(), n, [&](int64_t i) { equal += std::fabs(v[i]) == threshold; });
  int64_t ties = k - (at_least - equal), kept = 0;
  ForEachFlagged(flags.data(), n, [&](int64_t i) {
    if (std::fabs(v[i]) == threshold && ties-- <= 0) return;
    const uint32_t index = static_cast<uint32_t>(i);
    std::memcpy(out + 4 * kept, &index, 4);
    std::memcpy(out + 4 * (k + kept), &v[i], 4);
    v[i] = 0;
    ++kept;
  });
}

// The levels a value of the INT codecs takes: -kLevels..kLevels.
int LevelsOf(GradCompression::Codec codec) { return codec == GradCompression::INT8 ? 127 : 7; }

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

// INT8 / INT4: one fp32 scale a block, max|v| / levels, then the levels,
// one byte each (INT8) or two to a byte, the even value's in the low
// nibble (INT4). `v` as in EncodeSign; a residual is at most scale / 2.
void EncodeLevels(const GradCompression& spec, int64_t n, float* v, char* out) {
  const int levels = LevelsOf(spec.codec());
  const int64_t block = spec.block(), blocks = CeilDiv(n, block);
  char* data = out + 4 * blocks;
  thread_local std::vector<int8_t> q;
  q.resize(block);
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * block, end = std::min(n, begin + block);
    float scale = MaxMagnitude(v, begin, end) / static_cast<float>(levels);
    if (scale < std::numeric_limits<float>::min()) scale = 0;  // 1 / scale stays finite
    // max / 127 of a max at float's largest rounds up, and 127 x scale
    // would overflow: one step down keeps every level's value finite.
    if (std::isinf(static_cast<float>(levels) * scale)) scale = std::nextafter(scale, 0.0f);
    std::memcpy(out + 4 * b, &scale, 4);
    QuantizeBlock(v, begin, end, levels, scale, q.data());
    if (spec.codec() == GradCompression::INT8) {
      std::memcpy(data + begin, q.data(), end - begin);
      continue;
    }
    PackNibbles(q.data(), end - begin, reinterpret_cast<uint8_t*>(data + begin / 2));
  }
}

// Whether any level of an INT chunk's `data` (its n levels) is -128
// (INT8) or -8 (INT4), which the encoder writes none of, or INT4's unused
// last nibble is set. Byte by byte, so that it vectorizes.
PSTRAIN_SIMD_CLONES bool HasBadLevel(GradCompression::Codec codec, const uint8_t* data, int64_t n) {
  uint32_t bad = 0;
  if (codec == GradCompression::INT8) {
    for (int64_t i = 0; i < n; ++i) bad |= static_cast<uint32_t>(data[i] == 0x80);
    return bad != 0;
  }
  const int64_t bytes = CeilDiv(n, 2);
  for (int64_t i = 0; i < bytes; ++i) {
    bad |=
        static_cast<uint32_t>((data[i] & 0xF) == 0x8) | static_cast<uint32_t>(data[i] >> 4 == 0x8);
  }
  return bad != 0 || ((n & 1) && (data[bytes - 1] >> 4) != 0);
}

PSTRAIN_SIMD_CLONES void DecodeInt8(int64_t block, const char* bytes, int64_t n, float* out) {
  const int64_t blocks = CeilDiv(n, block);
  const int8_t* data = reinterpret_cast<const int8_t*>(bytes + 4 * blocks);
  for (int64_t b = 0; b < blocks; ++b) {
    float scale;
    std::memcpy(&scale, bytes + 4 * b, 4);
    const int64_t begin = b * block, end = std::min(n, begin + block);
    for (int64_t i = begin; i < end; ++i) out[i] = static_cast<float>(data[i]) * scale;
  }
}

PSTRAIN_SIMD_CLONES void DecodeInt4(int64_t block, const char* bytes, int64_t n, float* out) {
  const int64_t blocks = CeilDiv(n, block);
  const uint8_t* data = reinterpret_cast<const uint8_t*>(bytes + 4 * blocks);
  for (int64_t b = 0; b < blocks; ++b) {
    float scale;
    std::memcpy(&scale, bytes + 4 * b, 4);
    const int64_t begin = b * block, end = std::min(n, begin + block);
    int64_t i = begin;  // a block starts on a byte
    for (; i + 2 <= end; i += 2) {
      const uint8_t byte = data[i >> 1];
      out[i] = static_cast<float>(static_cast<int8_t>(byte << 4) >> 4) * scale;
      out[i + 1] = static_cast<float>(static_cast<int8_t>(byte) >> 4) * scale;
    }
    if (i < end) out[i] = static_cast<float>(static_cast<int8_t>(data[i >> 1] << 4) >> 4) * scale;
  }
}

// The sign bits of a byte as 8 words to XOR into a positive float.
struct SignMasks {
  uint32_t of[256][8];
  SignMasks() {
    for (int byte = 0; byte < 256; ++byte) {
      for (int k = 0; k < 8; ++k) of[byte][k] = ((byte >> k) & 1u) << 31;
    }
  }
};

PSTRAIN_SIMD_CLONES void DecodeSign(int64_t block, const char* bytes, int64_t n, float* out) {
  static const SignMasks* const masks = new SignMasks();
  const int64_t blocks = CeilDiv(n, block);
  const unsigned char* bits = reinterpret_cast<const unsigned char*>(bytes + 4 * blocks);
  for (int64_t b = 0; b < blocks; ++b) {
    uint32_t scale;
    std::memcpy(&scale, bytes + 4 * b, 4);
    const int64_t begin = b * block, end = std::min(n, begin + block);
    for (int64_t i = begin; i < end; i += 8) {  // a block starts on a byte
      const uint32_t* mask = masks->of[bits[i >> 3]];
      uint32_t words[8];
      for (int k = 0; k < 8; ++k) words[k] = scale ^ mask[k];
      std::memcpy(out + i, words, 4 * std::min<int64_t>(8, end - i));
    }
  }
}

}  // namespace

GradCompression WithCompressionDefaults(const GradCompression& spec) {
  GradCompression full = spec;
  if (!full.has_ratio()) full.set_ratio(kDefaultRatio);
  if (!full.has_block()) full.set_block(kDefaultBlock);
  if (!full.has_min_numel()) full.set_min_numel(kDefaultMinNumel);
  return full;
}

absl::Status CheckCompression(const GradCompression& spec) {
  if (!GradCompression::Codec_IsValid(spec.codec())) {
    return absl::InvalidArgumentError(absl::StrCat("compression: unknown codec ", spec.codec()));
  }
  if (!(spec.ratio() > 0 && spec.ratio() < 0.5f)) {  // 0.5 would save no byte
    return absl::InvalidArgumentError(
        absl::StrCat("compression: ratio ", spec.ratio(), " is outside (0, 0.5)"));
  }
  if (spec.block() < 8 || spec.block() > 65536 || spec.block() % 8 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("compression: block ", spec.block(), " is not a multiple of 8 in [8, 65536]"));
  }
  if (spec.min_numel() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("compression: min_numel ", spec.min_numel(), " is below 1"));
  }
  return absl::OkStatus();
}

bool CompressesPulls(const GradCompression& spec) {
  return spec.codec() != GradCompression::NONE && spec.pulls();
}

bool Compresses(const GradCompression& spec, int64_t numel) {
  // (TOP_K's indices are uint32; an encoding must fit where fp32 would, a
  // shared-memory slot.)
  return spec.codec() != GradCompression::NONE && numel > 0 && numel >= spec.min_numel() &&
         numel <= std::numeric_limits<uint32_t>::max() && EncodedBytes(spec, numel) < 4 * numel;
}

int64_t KeptValues(const GradCompression& spec, int64_t numel) {
  if (numel <= 0) return 0;
  const double kept = std::round(static_cast<double>(spec.ratio()) * static_cast<double>(numel));
  return std::clamp<int64_t>(static_cast<int64_t>(kept), 1, numel);
}

int64_t EncodedBytes(const GradCompression& spec, int64_t numel) {
  const int64_t scales = 4 * CeilDiv(numel, spec.block());
  switch (spec.codec()) {
    case GradCompression::SIGN:
      return scales + CeilDiv(numel, 8);
    case GradCompression::INT8:
      return scales + numel;
    case GradCompression::INT4:
      return scales + CeilDiv(numel, 2);
    default:
      return 8 * KeptValues(spec, numel);
  }
}

void EncodeWithFeedback(const GradCompression& spec, const float* values, int64_t n,
                        float* residual, char* out) {
  thread_local std::vector<float> v;
  v.resize(n);
  if (!SumFinite(values, residual, n, v.data())) {  // the residual stays as it was
    EncodeNonFinite(spec, n, out);
    return;
  }
  if (spec.codec() == GradCompression::SIGN) {
    EncodeSign(spec.block(), n, v.data(), out);
  } else if (spec.codec() == GradCompression::TOP_K) {
    EncodeTopK(KeptValues(spec, n), n, v.data(), out);
  } else {
    EncodeLevels(spec, n, v.data(), out);
  }
  std::memcpy(residual, v.data(), n * sizeof(float));
}

absl::Status Decode(const GradCompression& spec, const char* bytes, int64_t size, int64_t numel,
                    float* out) {
  if (size != EncodedBytes(spec, numel)) {
    return absl::InvalidArgumentError(absl::StrCat("a compressed chunk of ", numel,
                                                   " values takes ", EncodedBytes(spec, numel),
                                                   " bytes, not ", size));
  }
  if (spec.codec() != GradCompression::TOP_K) {
    for (int64_t b = 0; b < CeilDiv(numel, spec.block()); ++b) {
      uint32_t scale;
      std::memcpy(&scale, bytes + 4 * b, 4);
      if (scale & 0x80000000u) {  // the encoder writes none: it would flip a block
        return absl::InvalidArgumentError(
            absl::StrCat("a compressed chunk's scale ", b, " is negative"));
      }
    }
  }
  switch (spec.codec()) {
    case GradCompression::SIGN:
      DecodeSign(spec.block(), bytes, numel, out);
      return absl::OkStatus();
    case GradCompression::INT8:
    case GradCompression::INT4:
      if (HasBadLevel(spec.codec(),
                      reinterpret_cast<const uint8_t*>(bytes) + 4 * CeilDiv(numel, spec.block()),
                      numel)) {
        return absl::InvalidArgumentError(
            "a compressed chunk holds a level the encoder writes none of (-128 in INT8, -8 in "
            "INT4, or INT4's unused last nibble set)");
      }
      if (spec.codec() == GradCompression::INT8) {
        DecodeInt8(spec.block(), bytes, numel, out);
      } else {
        DecodeInt4(spec.block(), bytes, numel, out);
      }
      return absl::OkStatus();
    default:
      break;
  }
  const int64_t k = KeptValues(spec, numel);
  std::fill(out, out + numel, 0.0f);
  int64_t last = -1;
  for (int64_t i = 0; i < k; ++i) {
    uint32_t index;
    std::memcpy(&index, bytes + 4 * i, 4);
    if (static_cast<int64_t>(index) <= last || index >= numel) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a compressed chunk's index ", index, " is out of order or outside [0, ", numel, ")"));
    }
    last = index;
    std::memcpy(&out[index], bytes + 4 * (k + i), 4);
  }
  return absl::OkStatus();
}

}  // namespace pstrain
