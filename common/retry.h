// One retry loop for every client: an attempt function, a policy that says
// what each failure means, exponential backoff between retries, a window
// after which retryable failures stop being retried. Its users:
// common/scheduler_client.cc, worker/ps_client.cc, worker/row_client.cc and
// worker/external/optimizer_state.cc; nothing else loops on RPCs.
#ifndef PSTRAIN_COMMON_RETRY_H_
#define PSTRAIN_COMMON_RETRY_H_

#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace pstrain {

// What a failed attempt means to the loop.
enum class RetryAction {
  kStop,      // return the failure
  kRetry,     // sleep the next backoff, then try again, within the window
  kRetryNow,  // try again at once, whatever the window (the attempt itself
              // waited: a call that waited out its deadline for the remote
              // side's condition, e.g. a pull's read guarantee)
};

// Time as the loop sees it (tests pass a fake one).
struct RetryClock {
  std::function<absl::Time()> now = [] { return absl::Now(); };
  std::function<void(absl::Duration)> sleep = [](absl::Duration d) { absl::SleepFor(d); };
};

struct RetryPolicy {
  // How long kRetry failures are retried, from the first attempt. A retry
  // whose backoff would end past it is not made.
  absl::Duration window = absl::Seconds(30);
  // Exponential backoff: initial, doubling to max, with +-20% jitter.
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(2);
  // Classifies a failure; unset: IsRetryable (common/rpc.h) codes retry,
  // others stop.
  std::function<RetryAction(const absl::Status&)> classify;
  // Asked before every retry and every 100 ms of a backoff; a non-OK status
  // ends the loop with it (the caller gave up: a rollback, a shutdown).
  std::function<absl::Status()> abandon;
  // Asked after each failed attempt: true restarts the window (the attempt
  // made progress -- some of its work was done, or it waited on the remote
  // side's condition -- so the time it took is not time spent failing).
  // Unset: the window runs from the first attempt.
  std::function<bool()> restart_window;
  // Called once the loop gives a retryable failure up (the window ran out).
  std::function<void(const absl::Status&, int attempts)> on_give_up;
  // Called before every retry, with the failure and the attempts so far.
  std::function<void(const absl::Status&, int attempts)> on_retry;
  RetryClock clock;
};

// Runs `attempt` until it succeeds or the policy ends the loop; returns its
// last status. When the window runs out, that failure is returned as is
// (callers add what they were trying to do).
absl::Status Retry(const RetryPolicy& policy, const std::function<absl::Status()>& attempt);

template <typename T>
absl::StatusOr<T> Retry(const RetryPolicy& policy,
                        const std::function<absl::StatusOr<T>()>& attempt) {
  absl::StatusOr<T> result = absl::UnknownError("not attempted");
  const absl::Status st = Retry(policy, [&]() -> absl::Status {
    result = attempt();
    return result.status();
  });
  if (!st.ok()) return st;
  return result;
}

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_RETRY_H_
