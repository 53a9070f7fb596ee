// The one rule for gradients with a NaN or an Inf that reach a server,
// dense or rows alike. The unit is what one update of the server takes from
// one worker's push: a chunk's gradient, or the rows a push carries to one
// of a table's servers. It is judged before anything of it changes. When
// it holds a non-finite value it is taken -- the worker's clock moves on,
// and a BSP round closes over the other workers' samples -- but nothing of
// it is applied: no weight, no optimizer state, no step count moves. Each
// such unit is counted (Status: nonfinite_skipped, and per table) and
// logged, at most 5 lines a minute (common/log_limit.h). A job with
// optimizer.allow_nonfinite applies them as they are, dense and rows alike.
// No I/O but the log line.
#ifndef PSTRAIN_SERVER_NONFINITE_H_
#define PSTRAIN_SERVER_NONFINITE_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/types/span.h"
#include "common/log_limit.h"

namespace pstrain {

// Thread-safe.
class NonfiniteRule {
 public:
  // `allow`: the job's optimizer.allow_nonfinite.
  explicit NonfiniteRule(bool allow) : allow_(allow) {}

  // Whether `grads` -- worker `worker`'s gradients of iteration `clock` for
  // what `what()` names (a chunk, a table; asked only for a log line) --
  // may be applied. False counts them.
  bool Admits(absl::Span<const float> grads, int worker, int64_t clock,
              absl::FunctionRef<std::string()> what);

  // Units not applied so far.
  int64_t skipped() const { return skipped_.load(std::memory_order_relaxed); }

 private:
  const bool allow_;
  std::atomic<int64_t> skipped_{0};
  LogLimit log_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_NONFINITE_H_
