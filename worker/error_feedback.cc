#include "worker/error_feedback.h"

#include "common/grad_codec.h"

namespace pstrain {

ErrorFeedback::Residual& ErrorFeedback::Of(int32_t chunk) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<Residual>& r = residuals_[chunk];
  if (r == nullptr) r = std::make_unique<Residual>();
  return *r;
}

void ErrorFeedback::Encode(const GradCompression& spec, int32_t chunk, int64_t generation,
                           int64_t clock, const float* values, int64_t n, std::vector<char>* out) {
  Residual& r = Of(chunk);
  absl::MutexLock lock(&r.mu);
  if (r.generation == generation && r.clock == clock &&
      static_cast<int64_t>(r.sent.size()) == EncodedBytes(spec, n)) {
    *out = r.sent;
    return;
  }
  if (static_cast<int64_t>(r.values.size()) != n) r.values.assign(n, 0.0f);
  out->resize(EncodedBytes(spec, n));
  EncodeWithFeedback(spec, values, n, r.values.data(), out->data());
  r.generation = generation;
  r.clock = clock;
  r.sent = *out;
}

}  // namespace pstrain
