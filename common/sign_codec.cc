#include "common/sign_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/simd.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

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

PSTRAIN_SIMD_CLONES void EncodeSign(int64_t block, int64_t blocks, int64_t n, float* v, char* out) {
  unsigned char* bits = reinterpret_cast<unsigned char*>(out + 4 * blocks);
  std::memset(bits, 0, (n + 7) / 8);
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

// The sign bits of a byte as 8 words to XOR into a positive float.
struct SignMasks {
  uint32_t of[256][8];
  SignMasks() {
    for (int byte = 0; byte < 256; ++byte) {
      for (int k = 0; k < 8; ++k) of[byte][k] = ((byte >> k) & 1u) << 31;
    }
  }
};

PSTRAIN_SIMD_CLONES void DecodeSign(int64_t block, int64_t blocks, const char* bytes, int64_t n,
                                    float* out) {
  static const SignMasks* const masks = new SignMasks();
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

int64_t SignCodec::EncodedBytes(int64_t numel) const { return 4 * Blocks(numel) + (numel + 7) / 8; }

void SignCodec::Encode(int64_t n, float* v, char* out) const {
  EncodeSign(block(), Blocks(n), n, v, out);
}

absl::Status SignCodec::Decode(const char* bytes, int64_t numel, float* out) const {
  RETURN_IF_ERROR(CheckScales(bytes, numel));
  DecodeSign(block(), Blocks(numel), bytes, numel, out);
  return absl::OkStatus();
}

}  // namespace pstrain
