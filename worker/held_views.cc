#include "worker/held_views.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/grad_codec.h"

namespace pstrain {

HeldViews::Held& HeldViews::Of(int32_t chunk) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<Held>& h = chunks_[chunk];
  if (h == nullptr) h = std::make_unique<Held>();
  return *h;
}

uint64_t HeldViews::Id(int32_t chunk) {
  Held& h = Of(chunk);
  absl::MutexLock lock(&h.mu);
  return h.id;
}

int64_t HeldViews::PayloadBytes(uint64_t base, int64_t numel) const {
  return base == 0 ? numel * static_cast<int64_t>(sizeof(float)) : EncodedBytes(spec_, numel);
}

absl::Status HeldViews::Take(int32_t chunk, uint64_t base, uint64_t view, const char* bytes,
                             int64_t numel, float* dst) {
  Held& h = Of(chunk);
  absl::MutexLock lock(&h.mu);
  if (base == 0) {
    h.weights.resize(numel);
    std::memcpy(h.weights.data(), bytes, numel * sizeof(float));
  } else {
    thread_local std::vector<float> change;
    change.resize(numel);
    if (base != h.id || static_cast<int64_t>(h.weights.size()) != numel) {
      const uint64_t held = h.id;
      h.id = 0;
      return absl::AbortedError(absl::StrCat("pull of chunk ", chunk, ": a change from view ", base,
                                             "; this worker holds ", held));
    }
    if (absl::Status st = Decode(spec_, bytes, PayloadBytes(base, numel), numel, change.data());
        !st.ok()) {
      h.id = 0;
      return absl::DataLossError(absl::StrCat("pull of chunk ", chunk, ": ", st.message()));
    }
    for (int64_t i = 0; i < numel; ++i) h.weights[i] += change[i];  // as the server adds
  }
  h.id = view;
  std::memcpy(dst, h.weights.data(), numel * sizeof(float));
  return absl::OkStatus();
}

uint64_t HeldViews::Copy(int32_t chunk, std::vector<float>* weights) {
  Held& h = Of(chunk);
  absl::MutexLock lock(&h.mu);
  *weights = h.weights;
  return h.id;
}

void HeldViews::Forget(int32_t chunk) {
  Held& h = Of(chunk);
  absl::MutexLock lock(&h.mu);
  h.id = 0;
}

}  // namespace pstrain
