#include "worker/weight_arrivals.h"

#include <algorithm>

namespace pstrain {

int64_t WeightArrivals::Begin() {
  absl::MutexLock lock(&mu_);
  pulling_ = true;
  status_ = absl::OkStatus();
  landed_.assign(params_, false);
  return ++pull_;
}

void WeightArrivals::Landed(int64_t pull, int param) {
  absl::MutexLock lock(&mu_);
  if (pull == pull_ && pulling_ && param >= 0 && param < params_) landed_[param] = true;
}

void WeightArrivals::Forget() {
  absl::MutexLock lock(&mu_);
  pulling_ = false;
  status_ = absl::OkStatus();
  landed_.clear();
}

void WeightArrivals::Finish(int64_t pull, const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (pull != pull_) return;  // an earlier pull's
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
