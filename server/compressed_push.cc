#include "server/compressed_push.h"

#include "absl/strings/str_cat.h"
#include "common/grad_codec.h"

namespace pstrain {

absl::Status CompressedPush::Parse(const std::string& serialized) {
  spec_.reset();
  if (serialized.empty()) return absl::OkStatus();
  GradCompression spec;
  if (!spec.ParseFromString(serialized)) {
    return absl::InvalidArgumentError("push: malformed compression");
  }
  spec = WithCompressionDefaults(spec);
  if (spec.codec() == GradCompression::NONE) {
    return absl::InvalidArgumentError("push: a compression without a codec");
  }
  if (absl::Status st = CheckCompression(spec); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("push: ", st.message()));
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
