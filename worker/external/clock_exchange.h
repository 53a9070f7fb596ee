// The hand-off of each clock between the clock loop's thread, which offers
// the clock and waits for it, and the caller's thread (a PyTorch script's,
// through pstrain_c.h), which computes it: the example indices go one way;
// gradients-ready events and the clock's end come back. Knows nothing of
// gRPC or of the model.
#ifndef PSTRAIN_WORKER_EXTERNAL_CLOCK_EXCHANGE_H_
#define PSTRAIN_WORKER_EXTERNAL_CLOCK_EXCHANGE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/models/model.h"

namespace pstrain {

// Thread-safe.
class ClockExchange {
 public:
  // A clock as the caller sees it.
  struct OfferedClock {
    int64_t clock = 0;
    std::vector<int64_t> indices;  // this worker's examples
    // They are share `share_index` of `num_shares` of the clock's global batch
    // (the live workers', in the job's data order).
    int share_index = 0;
    int num_shares = 1;
  };

  explicit ClockExchange(int num_params) : num_params_(num_params) {}

  // The loop's side. Offers `offer` and waits until the caller ends the
  // clock, calling `ready` on this thread with the parameters the caller
  // says are ready, as it says so, and for each whether it has no gradient
  // this clock (GradsAbsent) and where its gradient lies when in the
  // caller's memory (GradsAt; else null); returns the caller's result.
  // CANCELLED once Close was called.
  using Ready = std::function<void(const std::vector<int>& params, const std::vector<bool>& absent,
                                   const std::vector<const float*>& at)>;
  absl::StatusOr<StepResult> RunClock(OfferedClock offer, const Ready& ready);
  // The loop ended with `status` (OK: every clock done, the final weights
  // read).
  void End(const absl::Status& status);

  // The caller's side. Waits up to `timeout` for the next clock: the clock;
  // nullopt once the loop ended well; DEADLINE_EXCEEDED when nothing came
  // in time; the loop's error once it failed.
  absl::StatusOr<std::optional<OfferedClock>> Await(absl::Duration timeout);
  // During a clock: parameter `param`'s gradient is complete.
  // FAILED_PRECONDITION outside a clock or for a parameter already reported
  // this clock; INVALID_ARGUMENT for an unknown one. A clock ended under
  // the caller (the loop failed, or Close) answers why: the loop's error,
  // else Close's `why` (a backward's hooks then raise JobAborted, not a
  // misuse).
  absl::Status GradsReady(int param);
  // During a clock: parameter `param` has no gradient this clock (frozen:
  // requires_grad False, or its .grad None); it is reported as ready, and
  // pushed without one. Errors as GradsReady's.
  absl::Status GradsAbsent(int param);
  // During a clock: parameter `param`'s gradient is complete at `at` (its
  // numel floats, the caller's, unchanged until the caller is told the
  // push is done), not in the model's buffer. Errors as GradsReady's.
  absl::Status GradsAt(int param, const float* at);
  // Ends the clock taken by Await. FAILED_PRECONDITION outside a clock;
  // a clock ended under the caller as GradsReady's.
  absl::Status ClockDone(const StepResult& result);

  // Either side: the caller goes away; RunClock returns CANCELLED with
  // `why` from now on.
  void Close(const absl::Status& why);

 private:
  enum class Phase { kIdle, kOffered, kTaken, kDone };
  // GradsReady's, GradsAbsent's and GradsAt's.
  absl::Status Report(int param, bool absent, const float* at);
  // The answer to a call that needs a clock under way when none is.
  absl::Status NotUnderWay(absl::string_view what) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int num_params_;
  absl::Mutex mu_;
  Phase phase_ ABSL_GUARDED_BY(mu_) = Phase::kIdle;
  OfferedClock offer_ ABSL_GUARDED_BY(mu_);
  // Reported, not yet handed to the loop.
  struct Event {
    int param;
    bool absent;      // without a gradient
    const float* at;  // in the caller's memory, or null
  };
  std::deque<Event> ready_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> reported_ ABSL_GUARDED_BY(mu_);   // this clock's
  StepResult result_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> ended_ ABSL_GUARDED_BY(mu_);   // the loop's end
  std::optional<absl::Status> closed_ ABSL_GUARDED_BY(mu_);  // the caller's
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_EXTERNAL_CLOCK_EXCHANGE_H_
