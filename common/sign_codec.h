// SIGN (JobSpec.compression, Seide et al. 2014, Bernstein et al. 2018): a
// chunk of n values is ceil(n / block) fp32 scales, each its block's mean
// |value|, then ceil(n / 8) bytes of signs (value i's sign is bit i % 8 of
// byte i / 8; 1: negative). Value i decodes to -scale or +scale of its
// block.
#ifndef PSTRAIN_COMMON_SIGN_CODEC_H_
#define PSTRAIN_COMMON_SIGN_CODEC_H_

#include "common/chunk_codec.h"

namespace pstrain {

class SignCodec : public BlockScaledCodec {
 public:
  explicit SignCodec(int64_t block) : BlockScaledCodec(block) {}

  int64_t EncodedBytes(int64_t numel) const override;
  // A scale is a mean of magnitudes (summed in double), so it never
  // exceeds the largest of them, and neither does what a value keeps,
  // | |v| - scale |.
  void Encode(int64_t n, float* v, char* out) const override;
  absl::Status Decode(const char* bytes, int64_t numel, float* out) const override;
};

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_SIGN_CODEC_H_
