// Calls that wait at a server until what they need holds -- a list of them:
// pulls until their read guarantee (the chunks' and the tables' rows),
// pushes until their standby confirmed or their round came -- and the
// wake-ups that answer them. A call is parked only under the list's lock,
// after a check that it may not be answered yet, and a wake-up takes the
// lock after the update that may change that: so no call stays parked past
// the update it waits for. Each parked call holds a reference (its
// handling one). The list answers nothing itself: its callers say when a
// call is ready and how it is answered. No gRPC of its own.
#ifndef PSTRAIN_SERVER_PARKED_CALLS_H_
#define PSTRAIN_SERVER_PARKED_CALLS_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/ps_call.h"

namespace pstrain {

// A worker's pulls name each of a server's chunks, or each of its tables,
// once at a time: more waiting than those and this many retries is a client
// gone wrong, and would only grow.
inline constexpr int64_t kParkedSlack = 64;

// Thread-safe.
class ParkedCalls {
 public:
  // `worker_of(call)`: the worker whose pull a call is.
  explicit ParkedCalls(std::function<int(const PsCall&)> worker_of)
      : worker_of_(std::move(worker_of)) {}
  ParkedCalls(const ParkedCalls&) = delete;
  ParkedCalls& operator=(const ParkedCalls&) = delete;

  // Under the lock: false when `ready()` -- the caller answers the call
  // now; else parks it (true), or RESOURCE_EXHAUSTED when its worker has
  // `limit` pulls waiting already.
  absl::StatusOr<bool> Park(PsCall* call, int64_t limit, absl::FunctionRef<bool()> ready);
  // Takes out the calls `ready(call)` says may be answered now (under the
  // lock; the claimed and abandoned ones are dropped), then, without it,
  // answers each with `answer(call)` when it wins Claim(), else calls
  // `lost(call)` (cancelled meanwhile). Each call's reference goes.
  void Wake(
      const std::function<bool(PsCall&)>& ready, const std::function<void(PsCall&)>& answer,
      const std::function<void(PsCall&)>& lost = [](PsCall&) {});
  // Takes out the calls `ready(call)` says may go on now, unclaimed, each
  // with its handling reference, for the caller to handle again (the
  // claimed and abandoned ones are dropped).
  std::vector<PsCall*> Release(const std::function<bool(PsCall&)>& ready);
  // Answers with `status` the parked calls `which(call)` selects that win
  // Claim(); they leave the list.
  void Cancel(const absl::Status& status, const std::function<bool(const PsCall&)>& which);
  // fn(call) for every call still waiting (neither claimed nor abandoned),
  // under the lock.
  void ForEachWaiting(const std::function<void(const PsCall&)>& fn) const;

 private:
  const std::function<int(const PsCall&)> worker_of_;
  mutable absl::Mutex mu_;
  std::vector<PsCall*> calls_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_PARKED_CALLS_H_
