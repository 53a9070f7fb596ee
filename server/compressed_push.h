// A push's compressed chunks (PushRequest.compression, common/grad_codec.h):
// which of its chunks came encoded, the bytes each must take, and their
// values, decoded before the store sees the push -- so a malformed payload
// refuses the whole push and nothing of it is applied.
#ifndef PSTRAIN_SERVER_COMPRESSED_PUSH_H_
#define PSTRAIN_SERVER_COMPRESSED_PUSH_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "proto/job.pb.h"

namespace pstrain {

class CompressedPush {
 public:
  // From the push's serialized GradCompression (PushHeader::compression;
  // empty: nothing is compressed). INVALID_ARGUMENT when it is malformed,
  // names no codec or is out of range.
  absl::Status Parse(const std::string& serialized);
  // Whether a chunk of `numel` values came compressed, and in how many bytes.
  bool Compresses(int64_t numel) const;
  int64_t EncodedBytes(int64_t numel) const;
  // Decodes part `part`'s payload (`size` bytes at `bytes`, chunk `chunk`
  // of `numel` values). INVALID_ARGUMENT naming the chunk when malformed.
  absl::Status Decode(size_t part, int32_t chunk, const char* bytes, int64_t size, int64_t numel);
  // Part `part`'s decoded values; empty unless Decode took it.
  absl::Span<const float> Values(size_t part) const;

 private:
  std::optional<GradCompression> spec_;
  std::vector<std::vector<float>> values_;  // per part
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_COMPRESSED_PUSH_H_
