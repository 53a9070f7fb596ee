// Whether a process still answers at a member's address: asked before a
// registration takes the id of a member that looks live
// (JobCoordinator::LiveHolder). A call of a method no pstrain service has
// is answered at once by any live gRPC server -- UNIMPLEMENTED, or a
// refusal of its credentials -- while a port nobody listens on any more (a
// killed process) fails at once with UNAVAILABLE, and a frozen process does
// not answer within the deadline: neither is live. No state of the job.
#ifndef PSTRAIN_SCHEDULER_MEMBER_PROBE_H_
#define PSTRAIN_SCHEDULER_MEMBER_PROBE_H_

#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace pstrain {

// Thread-safe.
class MemberProbe {
 public:
  explicit MemberProbe(absl::Duration deadline = absl::Seconds(1)) : deadline_(deadline) {}
  // Waits for the probes under way (each at most its deadline).
  ~MemberProbe();
  MemberProbe(const MemberProbe&) = delete;
  MemberProbe& operator=(const MemberProbe&) = delete;

  // Asks `address`; calls done(answered) once, on a gRPC thread.
  void Probe(const std::string& address, std::function<void(bool answered)> done);

 private:
  const absl::Duration deadline_;
  absl::Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_MEMBER_PROBE_H_
