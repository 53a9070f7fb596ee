#include "server/chunk_clocks.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pstrain {

ChunkClocks::ChunkClocks(std::vector<bool> pushers)
    : applied_(pushers.size(), 0), pushed_(pushers.size(), false), live_(std::move(pushers)) {}

int64_t ChunkClocks::MinApplied() const {
  int64_t min = INT64_MAX;
  for (size_t w = 0; w < applied_.size(); ++w) {
    if (live_[w]) min = std::min(min, applied_[w]);
  }
  return min == INT64_MAX ? *std::max_element(applied_.begin(), applied_.end()) : min;
}

bool ChunkClocks::RoundComplete() const {
  bool any = false;
  for (size_t w = 0; w < pushed_.size(); ++w) {
    if (live_[w] && !pushed_[w]) return false;
    any = any || pushed_[w];
  }
  return any;
}

absl::Status ChunkClocks::Classify(int worker, int64_t clock, int32_t chunk, bool at_once,
                                   bool* duplicate, bool early_retried) const {
  if (at_once && pushed_[worker] && clock == applied_[worker] + 1) {
    // The first clock after a change from BSP (psctl set-consistency) while
    // the worker's push of the clock before waits in a round still open:
    // the client retries once the other workers' pushes have closed it.
    *duplicate = false;
    return absl::UnavailableError(absl::StrCat("chunk ", chunk, ": worker ", worker,
                                               "'s push of clock ", clock - 1,
                                               " waits in an open BSP round"));
  }
  // The worker's next iteration for this chunk; BSP counts a push that waits
  // in the current round as taken.
  const int64_t next = applied_[worker] + (pushed_[worker] ? 1 : 0);
  *duplicate = clock >= 0 && clock < next;
  if (clock == next && !pushed_[worker]) return absl::OkStatus();
  if (*duplicate) return absl::OkStatus();
  if (early_retried && Early(worker, clock)) {
    // Its push of the clock before is still on its way (or waits in an
    // open round): standby copies let a worker have both under way.
    return absl::UnavailableError(
        absl::StrCat("chunk ", chunk, ": worker ", worker, "'s push of clock ", clock,
                     " came before the round of clock ", clock - 1, " was applied"));
  }
  return absl::InvalidArgumentError(absl::StrCat("push for clock ", clock, " of chunk ", chunk,
                                                 " but worker ", worker, " is at ", next));
}

bool ChunkClocks::Early(int worker, int64_t clock) const {
  const int64_t next = applied_[worker] + (pushed_[worker] ? 1 : 0);
  if (clock < next || (clock == next && !pushed_[worker])) return false;  // a repeat, or taken
  return clock == applied_[worker] + 1;
}

void ChunkClocks::NextRound() {
  for (size_t w = 0; w < applied_.size(); ++w) {
    pushed_[w] = false;
    if (live_[w]) ++applied_[w];
  }
}

bool ChunkClocks::Remove(int worker) {
  if (!live_[worker]) return false;
  live_[worker] = false;
  return true;
}

void ChunkClocks::Restore(int64_t clock) {
  for (size_t w = 0; w < applied_.size(); ++w) {
    applied_[w] = live_[w] ? clock : std::min(applied_[w], clock);
    pushed_[w] = false;
  }
}

std::string ChunkClocks::Lagging(int64_t min_clock, bool bsp) const {
  std::string out;
  for (size_t w = 0; w < applied_.size(); ++w) {
    if (!live_[w] || applied_[w] >= min_clock) continue;
    absl::StrAppend(&out, out.empty() ? "" : ", ", "worker ", w, " (", applied_[w], " applied",
                    bsp && pushed_[w] ? ", its next push in" : "", ")");
  }
  return out;
}

void ChunkClocks::SetApplied(const std::vector<int64_t>& applied) {
  applied_ = applied;
  std::fill(pushed_.begin(), pushed_.end(), false);
}

}  // namespace pstrain
