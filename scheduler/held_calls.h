// The calls the job holds until the cluster lets them go (gate calls, BSP
// norm calls), and their answers once it does. Plain bookkeeping: which
// call may go is the caller's decision (JobCoordinator's), passed in as a
// function. Not durable: a held call is a connection, lost with the process
// (its caller retries at the scheduler that takes the job over).
//
// Not thread-safe: the coordinator's owner guards it.
#ifndef PSTRAIN_SCHEDULER_HELD_CALLS_H_
#define PSTRAIN_SCHEDULER_HELD_CALLS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/gate.pb.h"
#include "proto/status.pb.h"

namespace pstrain {

// A call the coordinator holds; the service picks the number.
using Ticket = int64_t;

// A held call's answer.
struct Release {
  Ticket ticket = 0;
  absl::Status status;        // OK: the answer below
  AdvanceClockResponse gate;  // a gate call's
  double sum_squares = 0;     // a norm call's
};

struct HeldCall {
  Ticket ticket = 0;
  bool gate = true;  // a gate call (of a worker), else a norm call (of a server)
  int member = 0;    // the worker or server
  int64_t clock = 0;
  absl::Time since;
  bool stale = false;  // a gate of an older generation: answered with the resume clock
};

class HeldCalls {
 public:
  // Calls one member may have held at once (a retrying client leaves some
  // behind until they are cancelled).
  static constexpr int kMaxPerMember = 8;

  // Holds `call`; RESOURCE_EXHAUSTED when its member already has
  // kMaxPerMember calls of its kind held.
  absl::Status Hold(const HeldCall& call);
  // A held call that went away (cancelled): no Release for it.
  void Forget(Ticket ticket);
  // Answers the held calls for which `answer` has an answer now (the
  // Release's ticket is filled in here), oldest first; the others stay.
  void Answer(const std::function<std::optional<Release>(const HeldCall&)>& answer);
  // The answers since the last call, oldest first.
  std::vector<Release> TakeReleases();

  // Whether `worker` has a gate call of the current generation held.
  bool AtGate(int worker) const;
  // One Wait per held call: norm calls first, then gate calls;
  // `slowest_clock` is the gate's slowest worker.
  void AddWaits(int64_t slowest_clock, MemberStatus* out) const;

 private:
  std::vector<HeldCall> held_;  // oldest first
  std::vector<Release> releases_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_HELD_CALLS_H_
