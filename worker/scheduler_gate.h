// The scheduler client (common/scheduler_client.h) as the clock loop's gate
// (GateClient, worker/clock_loop.h): synchronous calls go straight to the
// client; asynchronous ones go one after another on a thread of its own
// (a SerialQueue), not on a thread per call.
#ifndef PSTRAIN_WORKER_SCHEDULER_GATE_H_
#define PSTRAIN_WORKER_SCHEDULER_GATE_H_

#include <cstdint>
#include <future>

#include "absl/status/statusor.h"
#include "common/scheduler_client.h"
#include "proto/gate.pb.h"
#include "worker/clock_loop.h"
#include "worker/serial_queue.h"

namespace pstrain {

// Thread-safe as SchedulerClient is. `client` must outlive the gate.
class SchedulerGate : public GateClient {
 public:
  explicit SchedulerGate(SchedulerClient* client) : client_(client) {}
  // Waits for the asynchronous call under way; the futures of calls still
  // queued are broken (no one waits on them then).
  ~SchedulerGate() override = default;

  absl::StatusOr<AdvanceClockResponse> AdvanceClock(const AdvanceClockRequest& req) override;
  std::future<absl::StatusOr<AdvanceClockResponse>> AdvanceClockAsync(
      AdvanceClockRequest req) override;
  int64_t generation() const override { return client_->generation(); }

 private:
  SchedulerClient* const client_;
  SerialQueue calls_;  // last: its thread ends before the rest goes
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_SCHEDULER_GATE_H_
