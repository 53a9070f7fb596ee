#include "common/grad_codec.h"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/chunk_codec.h"
#include "common/simd.h"
#include "common/top_k_codec.h"

namespace pstrain {
namespace {

constexpr float kDefaultRatio = 0.1f;
constexpr int32_t kDefaultBlock = 256;
constexpr int64_t kDefaultMinNumel = 4096;

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
  return TopKCodec(spec.ratio()).Kept(numel);
}

int64_t EncodedBytes(const GradCompression& spec, int64_t numel) {
  const std::unique_ptr<ChunkCodec> codec = MakeCodec(spec);
  return codec == nullptr ? 4 * numel : codec->EncodedBytes(numel);
}

void EncodeWithFeedback(const GradCompression& spec, const float* values, int64_t n,
                        float* residual, char* out) {
  const std::unique_ptr<ChunkCodec> codec = MakeCodec(spec);
  if (codec == nullptr) std::abort();  // a caller's bug: only a chunk that Compresses encodes
  thread_local std::vector<float> v;
  v.resize(n);
  if (!SumFinite(values, residual, n, v.data())) {  // the residual stays as it was
    codec->EncodeNonFinite(n, out);
    return;
  }
  codec->Encode(n, v.data(), out);
  std::memcpy(residual, v.data(), n * sizeof(float));
}

absl::Status Decode(const GradCompression& spec, const char* bytes, int64_t size, int64_t numel,
                    float* out) {
  const std::unique_ptr<ChunkCodec> codec = MakeCodec(spec);
  if (codec == nullptr) return absl::InvalidArgumentError("a compressed chunk without a codec");
  if (size != codec->EncodedBytes(numel)) {
    return absl::InvalidArgumentError(absl::StrCat("a compressed chunk of ", numel,
                                                   " values takes ", codec->EncodedBytes(numel),
                                                   " bytes, not ", size));
  }
  return codec->Decode(bytes, numel, out);
}

}  // namespace pstrain
