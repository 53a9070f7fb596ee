#include "worker/weight_arrivals.h"

#include <algorithm>

namespace pstrain {

void WeightArrivals::Begin() {
  absl::MutexLock lock(&mu_);
  pulling_ = true;
  status_ = absl::OkStatus();
  landed_.assign(params_, false);
}

void WeightArrivals::Landed(int param) {
  absl::MutexLock lock(&mu_);
  if (pulling_ && param >= 0 && param < params_) landed_[param] = true;
}

void WeightArrivals::Finish(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  pulling_ = false;
  status_ = status;
  if (status.ok()) std::fill(landed_.begin(), landed_.end(), true);
}

bool WeightArrivals::LandedLocked(const std::vector<int>& params) const {
  if (landed_.empty()) return true;
  for (int p : params) {
    if (p >= 0 && p < params_ && !landed_[p]) return false;
  }
  return true;
}

absl::Status WeightArrivals::Await(const std::vector<int>& params) {
  absl::MutexLock lock(&mu_);
  auto ready = [&]()
                   ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !pulling_ || LandedLocked(params); };
  if (!ready()) {
    const absl::Time start = absl::Now();
    mu_.Await(absl::Condition(&ready));
    waited_ += absl::Now() - start;
  }
  return LandedLocked(params) ? absl::OkStatus() : status_;
}

absl::Duration WeightArrivals::TakeWaited() {
  absl::MutexLock lock(&mu_);
  const absl::Duration waited = waited_;
  waited_ = absl::ZeroDuration();
  return waited;
}

}  // namespace pstrain
