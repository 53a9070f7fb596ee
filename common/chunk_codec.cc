#include "common/chunk_codec.h"

#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/level_codecs.h"
#include "common/sign_codec.h"
#include "common/top_k_codec.h"

namespace pstrain {

void BlockScaledCodec::EncodeNonFinite(int64_t n, char* out) const {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int64_t blocks = Blocks(n);
  for (int64_t b = 0; b < blocks; ++b) std::memcpy(out + 4 * b, &nan, 4);
  std::memset(out + 4 * blocks, 0, EncodedBytes(n) - 4 * blocks);
}

absl::Status BlockScaledCodec::CheckScales(const char* bytes, int64_t numel) const {
  for (int64_t b = 0; b < Blocks(numel); ++b) {
    uint32_t scale;
    std::memcpy(&scale, bytes + 4 * b, 4);
    if (scale & 0x80000000u) {
      return absl::InvalidArgumentError(
          absl::StrCat("a compressed chunk's scale ", b, " is negative"));
    }
  }
  return absl::OkStatus();
}

std::unique_ptr<ChunkCodec> MakeCodec(const GradCompression& spec) {
  switch (spec.codec()) {
    case GradCompression::SIGN:
      return std::make_unique<SignCodec>(spec.block());
    case GradCompression::TOP_K:
      return std::make_unique<TopKCodec>(spec.ratio());
    case GradCompression::INT8:
      return std::make_unique<Int8Codec>(spec.block());
    case GradCompression::INT4:
      return std::make_unique<Int4Codec>(spec.block());
    default:
      return nullptr;
  }
}

}  // namespace pstrain
