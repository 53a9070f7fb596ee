#include "server/byte_budget.h"

#include <algorithm>

namespace pstrain {

void ByteBudget::SetLimit(int64_t limit) {
  absl::MutexLock lock(&mu_);
  limit_ = limit;
}

bool ByteBudget::Take(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  if (in_use_ > 0 && bytes > limit_ - in_use_) return false;
  in_use_ += bytes;
  peak_ = std::max(peak_, in_use_);
  return true;
}

void ByteBudget::Give(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  in_use_ -= bytes;
}

int64_t ByteBudget::limit() const {
  absl::MutexLock lock(&mu_);
  return limit_;
}

int64_t ByteBudget::in_use() const {
  absl::MutexLock lock(&mu_);
  return in_use_;
}

int64_t ByteBudget::peak() const {
  absl::MutexLock lock(&mu_);
  return peak_;
}

}  // namespace pstrain
