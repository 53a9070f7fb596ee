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

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "proto/job.pb.h"

namespace pstrain {

class CompressedPush {
 public:
  // From the push's serialized GradCompression (PushHeader::compression;
  // empty: nothing is compressed), which must be the job's own
  // (`job`, JobSpec.compression): INVALID_ARGUMENT when it is malformed or
  // another -- a job without compression takes none.
  absl::Status Parse(const std::string& serialized, const GradCompression& job);
  bool active() const { return spec_.has_value(); }
  // Whether a chunk of `numel` values came compressed, and in how many bytes.
  bool Compresses(int64_t numel) const;
  int64_t EncodedBytes(int64_t numel) const;
  // Decodes part `part`'s payload (`size` bytes at `bytes`, chunk `chunk`
  // of `numel` values). INVALID_ARGUMENT naming the chunk when malformed.
  // A chunk named twice in one push is refused (its decoding would be
  // held twice).
  absl::Status Decode(size_t part, int32_t chunk, const char* bytes, int64_t size, int64_t numel);
  // Part `part`'s decoded values; empty unless Decode took it.
  absl::Span<const float> Values(size_t part) const;

 private:
  std::optional<GradCompression> spec_;
  std::vector<std::vector<float>> values_;  // per part
  absl::flat_hash_set<int32_t> chunks_;     // decoded
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_COMPRESSED_PUSH_H_
