// INT8 and INT4 (JobSpec.compression; QSGD's levels, Alistarh et al. 2017,
// rounded to nearest rather than stochastically): a chunk of n values is
// ceil(n / block) fp32 scales, each its block's max |value| / L, then each
// value's level in [-L, L] -- INT8: L = 127, n int8 levels; INT4: L = 7,
// two's-complement nibbles two to a byte, value i's in the low nibble of
// byte i / 2 when i is even, an odd n's last high nibble 0. Value i
// decodes to its level times its block's scale. What a value keeps is at
// most scale / 2.
#ifndef PSTRAIN_COMMON_LEVEL_CODECS_H_
#define PSTRAIN_COMMON_LEVEL_CODECS_H_

#include "common/chunk_codec.h"

namespace pstrain {

// What both level codecs share: the scales, the rounding to levels, and
// the check of the levels read.
class LevelCodec : public BlockScaledCodec {
 public:
  void Encode(int64_t n, float* v, char* out) const override;
  // INVALID_ARGUMENT for a negative scale or a level the encoder writes
  // none of (-128 in INT8, -8 in INT4, or INT4's unused last nibble set).
  absl::Status Decode(const char* bytes, int64_t numel, float* out) const override;

 protected:
  LevelCodec(int64_t block, int levels) : BlockScaledCodec(block), levels_(levels) {}

  // A block's levels `q` (`n` of them) written into the data from value
  // `begin` on.
  virtual void WriteLevels(const int8_t* q, int64_t n, int64_t begin, char* data) const = 0;
  // Whether the chunk's `n` levels at `data` hold one the encoder never writes.
  virtual bool HasBadLevel(const uint8_t* data, int64_t n) const = 0;
  // Values [begin, end) of one block of `scale`, from the levels at `data`
  // (the chunk's, after the scales), knowing they are good.
  virtual void DecodeBlock(const char* data, int64_t begin, int64_t end, float scale,
                           float* out) const = 0;

 private:
  const int levels_;
};

class Int8Codec : public LevelCodec {
 public:
  explicit Int8Codec(int64_t block) : LevelCodec(block, 127) {}
  int64_t EncodedBytes(int64_t numel) const override { return 4 * Blocks(numel) + numel; }

 private:
  void WriteLevels(const int8_t* q, int64_t n, int64_t begin, char* data) const override;
  bool HasBadLevel(const uint8_t* data, int64_t n) const override;
  void DecodeBlock(const char* data, int64_t begin, int64_t end, float scale,
                   float* out) const override;
};

class Int4Codec : public LevelCodec {
 public:
  explicit Int4Codec(int64_t block) : LevelCodec(block, 7) {}
  int64_t EncodedBytes(int64_t numel) const override { return 4 * Blocks(numel) + (numel + 1) / 2; }

 private:
  void WriteLevels(const int8_t* q, int64_t n, int64_t begin, char* data) const override;
  bool HasBadLevel(const uint8_t* data, int64_t n) const override;
  void DecodeBlock(const char* data, int64_t begin, int64_t end, float scale,
                   float* out) const override;
};

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_LEVEL_CODECS_H_
