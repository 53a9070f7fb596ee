#include "server/memory_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace {

// The plan for `budget` before checking that it holds the largest slab.
// (The slabs' share never shrinks as the budget grows.)
ServerMemoryPlan Split(int64_t budget, const ServerMemoryNeeds& needs) {
  ServerMemoryPlan plan;
  const int64_t in_flight = std::max(budget / 4, 2 * needs.largest_message);
  plan.requests = in_flight / 2;
  plan.replies = in_flight - plan.requests;
  plan.slabs = budget - in_flight;
  plan.push_window = std::max(plan.requests / std::max(1, needs.workers), needs.largest_message);
  return plan;
}

}  // namespace

int64_t MinimumServerBudget(const ServerMemoryNeeds& needs) {
  // The slabs' share is at most budget - 2 messages and at most
  // 3/4 budget + 3/4: below both bounds nothing works; from there, the
  // first budget that works (the share grows with the budget).
  int64_t least = std::max(needs.largest_slab + 2 * needs.largest_message,
                           (4 * needs.largest_slab - 3) / 3 - 1);
  least = std::max<int64_t>(least, 1);
  while (Split(least, needs).slabs < needs.largest_slab) ++least;
  return least;
}

absl::StatusOr<ServerMemoryPlan> PlanServerMemory(int64_t budget, const ServerMemoryNeeds& needs) {
  const ServerMemoryPlan plan = Split(budget, needs);
  if (budget <= 0 || plan.slabs < needs.largest_slab) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--memory_budget=", budget, " cannot hold this server's largest chunk (weights, ",
        "optimizer state and round sum: ", needs.largest_slab, " bytes) beside the requests and ",
        "replies in flight (an eighth of the budget each, at least one chunk's ",
        needs.largest_message, " bytes); give at least ", MinimumServerBudget(needs)));
  }
  return plan;
}

}  // namespace pstrain
