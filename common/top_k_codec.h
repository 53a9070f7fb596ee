// TOP_K (JobSpec.compression; Aji and Heafield 2017, Stich et al. 2018): a
// chunk of n values keeps the k = Kept(n) of largest magnitude (ties: the
// lower index first) and is k uint32 indices, strictly ascending and below
// n, then their k fp32 values; every other value decodes to 0.
#ifndef PSTRAIN_COMMON_TOP_K_CODEC_H_
#define PSTRAIN_COMMON_TOP_K_CODEC_H_

#include "common/chunk_codec.h"

namespace pstrain {

class TopKCodec : public ChunkCodec {
 public:
  // `ratio`: the share of a chunk's values kept, in (0, 0.5).
  explicit TopKCodec(float ratio) : ratio_(ratio) {}

  // The values a chunk of `numel` keeps: ratio x numel rounded, at least 1.
  int64_t Kept(int64_t numel) const;

  int64_t EncodedBytes(int64_t numel) const override { return 8 * Kept(numel); }
  // What a value keeps is 0 for the kept ones and itself for the others.
  void Encode(int64_t n, float* v, char* out) const override;
  // Indices 0..k-1, each with a NaN.
  void EncodeNonFinite(int64_t n, char* out) const override;
  // INVALID_ARGUMENT for an index out of range or out of order.
  absl::Status Decode(const char* bytes, int64_t numel, float* out) const override;

 private:
  const float ratio_;
};

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_TOP_K_CODEC_H_
