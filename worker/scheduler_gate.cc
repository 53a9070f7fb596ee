#include "worker/scheduler_gate.h"

#include <utility>

namespace pstrain {

absl::StatusOr<AdvanceClockResponse> SchedulerGate::AdvanceClock(const AdvanceClockRequest& req) {
  return client_->AdvanceClock(req);
}

std::future<absl::StatusOr<AdvanceClockResponse>> SchedulerGate::AdvanceClockAsync(
    AdvanceClockRequest req) {
  std::promise<absl::StatusOr<AdvanceClockResponse>> answer;
  std::future<absl::StatusOr<AdvanceClockResponse>> future = answer.get_future();
  calls_.Run([this, req = std::move(req), answer = std::move(answer)]() mutable {
    answer.set_value(client_->AdvanceClock(req));
  });
  return future;
}

}  // namespace pstrain
