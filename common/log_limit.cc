#include "common/log_limit.h"

namespace pstrain {

bool LogLimit::Allow(int64_t* held_back, absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (now - window_start_ >= period_ || now < window_start_) {  // (a clock set back too)
    window_start_ = now;
    in_window_ = 0;
  }
  if (in_window_ >= burst_) {
    ++held_back_;
    return false;
  }
  ++in_window_;
  *held_back = held_back_;
  held_back_ = 0;
  return true;
}

int64_t LogLimit::held_back() const {
  absl::MutexLock lock(&mu_);
  return held_back_;
}

}  // namespace pstrain
