// A compression codec's encoding of one chunk of fp32 values
// (JobSpec.compression, docs/compression.md), one class a codec:
// SignCodec (common/sign_codec.h), TopKCodec (common/top_k_codec.h),
// Int8Codec and Int4Codec (common/level_codecs.h). MakeCodec picks a job's;
// common/grad_codec.h, what workers and servers call, encodes with error
// feedback and decodes through it. Each codec's header gives its layout:
// an encoding's size follows from the chunk's size alone, so a payload of
// another size is malformed. All encodings are little-endian and read and
// written at any alignment.
#ifndef PSTRAIN_COMMON_CHUNK_CODEC_H_
#define PSTRAIN_COMMON_CHUNK_CODEC_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "proto/job.pb.h"

namespace pstrain {

class ChunkCodec {
 public:
  virtual ~ChunkCodec() = default;

  // The bytes a chunk of `numel` values encodes into.
  virtual int64_t EncodedBytes(int64_t numel) const = 0;
  // Encodes the `n` finite values of `v` into EncodedBytes(n) bytes at
  // `out`, leaving in `v` what the encoding left out, v - decode(out).
  virtual void Encode(int64_t n, float* v, char* out) const = 0;
  // EncodedBytes(n) bytes at `out` that decode to NaN wherever they decode
  // to anything (a non-finite gradient's encoding: the server then counts
  // the push as non-finite, as it would the dense gradient).
  virtual void EncodeNonFinite(int64_t n, char* out) const = 0;
  // Decodes EncodedBytes(numel) bytes (the caller checked the size) into
  // the chunk's `numel` values at `out`. INVALID_ARGUMENT for bytes the
  // encoder never writes; `out` is then unspecified.
  virtual absl::Status Decode(const char* bytes, int64_t numel, float* out) const = 0;
};

// What SIGN, INT8 and INT4 share: ceil(n / block) fp32 scales first, one a
// block of values (block % 8 == 0, so a block starts on a byte of signs or
// levels), then the codec's data.
class BlockScaledCodec : public ChunkCodec {
 public:
  explicit BlockScaledCodec(int64_t block) : block_(block) {}

  // NaN scales, and zeros after them.
  void EncodeNonFinite(int64_t n, char* out) const override;

 protected:
  int64_t block() const { return block_; }
  int64_t Blocks(int64_t n) const { return (n + block_ - 1) / block_; }
  // INVALID_ARGUMENT when a scale is negative: the encoder writes none (it
  // would flip a block).
  absl::Status CheckScales(const char* bytes, int64_t numel) const;

 private:
  const int64_t block_;
};

// The codec of `spec` (its defaults filled in, common/grad_codec.h); null
// for NONE.
std::unique_ptr<ChunkCodec> MakeCodec(const GradCompression& spec);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_CHUNK_CODEC_H_
