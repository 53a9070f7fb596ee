#include "server/compressed_push.h"

#include "absl/strings/str_cat.h"
#include "common/grad_codec.h"
#include "google/protobuf/util/message_differencer.h"

namespace pstrain {

absl::Status CompressedPush::Parse(const std::string& serialized, const GradCompression& job) {
  spec_.reset();
  if (serialized.empty()) return absl::OkStatus();
  GradCompression spec;
  if (!spec.ParseFromString(serialized)) {
    return absl::InvalidArgumentError("push: malformed compression");
  }
  if (job.codec() == GradCompression::NONE ||
      !google::protobuf::util::MessageDifferencer::Equals(spec, job)) {
    return absl::InvalidArgumentError(absl::StrCat("push: compressed as {", spec.ShortDebugString(),
                                                   "}; the job's compression is {",
                                                   job.ShortDebugString(), "}"));
  }
  spec_ = std::move(spec);
  return absl::OkStatus();
}

bool CompressedPush::Compresses(int64_t numel) const {
  return spec_.has_value() && pstrain::Compresses(*spec_, numel);
}

int64_t CompressedPush::EncodedBytes(int64_t numel) const {
  return pstrain::EncodedBytes(*spec_, numel);
}

absl::Status CompressedPush::Decode(size_t part, int32_t chunk, const char* bytes, int64_t size,
                                    int64_t numel) {
  if (!chunks_.insert(chunk).second) {
    return absl::InvalidArgumentError(absl::StrCat("push: chunk ", chunk, " named twice"));
  }
  if (values_.size() <= part) values_.resize(part + 1);
  std::vector<float>& out = values_[part];
  out.resize(numel);
  if (absl::Status st = pstrain::Decode(*spec_, bytes, size, numel, out.data()); !st.ok()) {
    out.clear();
    return absl::InvalidArgumentError(absl::StrCat("push: chunk ", chunk, ": ", st.message()));
  }
  return absl::OkStatus();
}

absl::Span<const float> CompressedPush::Values(size_t part) const {
  if (part >= values_.size()) return {};
  return absl::MakeConstSpan(values_[part]);
}

}  // namespace pstrain
