// A count of bytes in use against a limit, for buffers whose total must
// stay bounded (an offloaded server's pull replies built and not yet sent):
// Take admits `bytes` when they fit under the limit, or when nothing is in
// use (so that one item larger than the limit still goes, alone, instead of
// never). Knows nothing of what the bytes are. Thread-safe.
#ifndef PSTRAIN_SERVER_BYTE_BUDGET_H_
#define PSTRAIN_SERVER_BYTE_BUDGET_H_

#include <cstdint>
#include <limits>

#include "absl/synchronization/mutex.h"

namespace pstrain {

class ByteBudget {
 public:
  explicit ByteBudget(int64_t limit = std::numeric_limits<int64_t>::max()) : limit_(limit) {}

  // From now on (what is in use stays).
  void SetLimit(int64_t limit);
  // True (and counted) when `bytes` (>= 0) may be used now.
  bool Take(int64_t bytes);
  // Returns bytes an earlier Take counted.
  void Give(int64_t bytes);

  int64_t limit() const;
  int64_t in_use() const;
  // The most ever in use at once.
  int64_t peak() const;

 private:
  mutable absl::Mutex mu_;
  int64_t limit_ ABSL_GUARDED_BY(mu_);
  int64_t in_use_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t peak_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_BYTE_BUDGET_H_
