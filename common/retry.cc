#include "common/retry.h"

#include "common/rpc.h"

namespace pstrain {

absl::Status Retry(const RetryPolicy& policy, const std::function<absl::Status()>& attempt) {
  const absl::Time give_up = policy.clock.now() + policy.window;
  Backoff backoff(policy.initial_backoff, policy.max_backoff);
  for (int attempts = 1;; ++attempts) {
    const absl::Status st = attempt();
    if (st.ok()) return st;
    const RetryAction action = policy.classify   ? policy.classify(st)
                               : IsRetryable(st) ? RetryAction::kRetry
                                                 : RetryAction::kStop;
    if (action == RetryAction::kStop) return st;
    absl::Duration wait = absl::ZeroDuration();
    if (action == RetryAction::kRetry) {
      wait = backoff.Next();
      if (policy.clock.now() + wait > give_up) return st;
    }
    if (policy.abandon) {
      if (absl::Status why = policy.abandon(); !why.ok()) return why;
    }
    if (policy.on_retry) policy.on_retry(st, attempts);
    if (wait > absl::ZeroDuration()) policy.clock.sleep(wait);
  }
}

}  // namespace pstrain
