#include "worker/error_feedback.h"

#include <cmath>

#include "common/grad_codec.h"

namespace pstrain {

ErrorFeedback::Residual& ErrorFeedback::Of(int32_t chunk, int64_t n) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<Residual>& r = residuals_[chunk];
  if (r == nullptr) {
    r = std::make_unique<Residual>();
    absl::MutexLock chunk_lock(&r->mu);
    r->values.assign(n, 0.0f);
  }
  return *r;
}

void ErrorFeedback::Encode(const GradCompression& spec, int32_t chunk, const float* values,
                           int64_t n, std::vector<char>* out) {
  Residual& r = Of(chunk, n);
  out->resize(EncodedBytes(spec, n));
  absl::MutexLock lock(&r.mu);
  if (static_cast<int64_t>(r.values.size()) != n) r.values.assign(n, 0.0f);
  EncodeWithFeedback(spec, values, n, r.values.data(), out->data());
}

double ErrorFeedback::ResidualNorm() const {
  absl::MutexLock lock(&mu_);
  double sum = 0;
  for (const auto& [chunk, r] : residuals_) {
    absl::MutexLock chunk_lock(&r->mu);
    for (float v : r->values) sum += static_cast<double>(v) * v;
  }
  return std::sqrt(sum);
}

}  // namespace pstrain
