#include "common/retry.h"

#include <algorithm>

#include "common/rpc.h"

namespace pstrain {
namespace {

// Sleeps `wait`; with an abandon check, in slices that ask it after each
// (a loop told to give up stops within a slice, not after a 2 s backoff).
absl::Status Sleep(const RetryPolicy& policy, absl::Duration wait) {
  if (!policy.abandon) {
    if (wait > absl::ZeroDuration()) policy.clock.sleep(wait);
    return absl::OkStatus();
  }
  constexpr absl::Duration kSlice = absl::Milliseconds(100);
  while (wait > absl::ZeroDuration()) {
    const absl::Duration slice = std::min(wait, kSlice);
    policy.clock.sleep(slice);
    wait -= slice;
    if (absl::Status why = policy.abandon(); !why.ok()) return why;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Retry(const RetryPolicy& policy, const std::function<absl::Status()>& attempt) {
  absl::Time give_up = policy.clock.now() + policy.window;
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
      if (policy.restart_window && policy.restart_window()) {
        give_up = policy.clock.now() + policy.window;
      }
      if (policy.clock.now() + wait > give_up) {
        if (policy.on_give_up) policy.on_give_up(st, attempts);
        return st;
      }
    }
    if (policy.abandon) {
      if (absl::Status why = policy.abandon(); !why.ok()) return why;
    }
    if (policy.on_retry) policy.on_retry(st, attempts);
    if (absl::Status why = Sleep(policy, wait); !why.ok()) return why;
  }
}

}  // namespace pstrain
