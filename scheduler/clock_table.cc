#include "scheduler/clock_table.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace pstrain {

ClockTable::ClockTable(int num_workers, int64_t staleness)
    : clocks_(num_workers, 0),
      pushed_(num_workers, 0),
      removed_(num_workers, false),
      may_jump_(num_workers, false),
      caught_up_(num_workers, false),
      staleness_(staleness) {}

void ClockTable::Restore(const std::vector<int64_t>& clocks, const std::vector<bool>& removed) {
  for (int w = 0; w < num_workers(); ++w) {
    if (w < static_cast<int>(clocks.size())) clocks_[w] = clocks[w];
    pushed_[w] = std::min(pushed_[w], clocks_[w]);
    if (w < static_cast<int>(removed.size())) removed_[w] = removed[w];
    may_jump_[w] = true;
  }
}

absl::Status ClockTable::Restore(const ClockTableState& state, int64_t max_clock) {
  if (state.clocks_size() != num_workers() || state.removed_size() != num_workers() ||
      (state.pushed_size() != 0 && state.pushed_size() != num_workers())) {
    return absl::InvalidArgumentError("the clock table does not fit the job's workers");
  }
  for (const auto* column : {&state.clocks(), &state.pushed()}) {
    for (int64_t c : *column) {
      if (c < 0 || c > max_clock) {
        return absl::InvalidArgumentError(
            absl::StrCat("worker clock ", c, " out of range for the job"));
      }
    }
  }
  // An older file without pushed clocks: every worker's clock (as before).
  pushed_.assign(state.pushed().begin(), state.pushed().end());
  if (pushed_.empty()) pushed_.assign(state.clocks().begin(), state.clocks().end());
  Restore(std::vector<int64_t>(state.clocks().begin(), state.clocks().end()),
          std::vector<bool>(state.removed().begin(), state.removed().end()));
  return absl::OkStatus();
}

void ClockTable::AddStatus(ClusterStatus* out) const {
  for (int w = 0; w < num_workers(); ++w) out->add_worker_clocks(removed_[w] ? -1 : clocks_[w]);
}

ClockTableState ClockTable::Snapshot() const {
  ClockTableState out;
  for (int w = 0; w < num_workers(); ++w) {
    out.add_clocks(clocks_[w]);
    out.add_removed(removed_[w]);
    out.add_pushed(pushed_[w]);
  }
  return out;
}

absl::Status ClockTable::Advance(int worker, int64_t clock) {
  if (worker < 0 || worker >= num_workers()) {
    return absl::InvalidArgumentError(absl::StrCat("unknown worker ", worker));
  }
  const int64_t current = clocks_[worker];
  if (clock == current) return absl::OkStatus();
  if (caught_up_[worker] && clock < current) return absl::OkStatus();  // reports catching up
  caught_up_[worker] = false;
  if (may_jump_[worker] && clock > current) {
    may_jump_[worker] = false;
    clocks_[worker] = clock;
    return absl::OkStatus();
  }
  if (clock != current + 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker ", worker, " is at clock ", current, " and cannot move to ", clock));
  }
  clocks_[worker] = clock;
  return absl::OkStatus();
}

void ClockTable::NotePushed(int worker, int64_t pushed) {
  if (worker < 0 || worker >= num_workers()) return;
  pushed_[worker] = std::max(pushed_[worker], std::min(pushed, clocks_[worker]));
}

int64_t ClockTable::RestartPoint(int worker) {
  if (worker < 0 || worker >= num_workers()) return 0;
  Rewind(worker, pushed_[worker]);
  return clocks_[worker];
}

bool ClockTable::MayStart(int64_t clock, int64_t staleness) const {
  if (staleness < 0) return true;
  return SlowestClock() >= clock - staleness;
}

void ClockTable::Remove(int worker) {
  if (worker >= 0 && worker < num_workers()) removed_[worker] = true;
}

void ClockTable::Reset(int64_t clock) {
  std::fill(clocks_.begin(), clocks_.end(), clock);
  std::fill(pushed_.begin(), pushed_.end(), clock);
  std::fill(may_jump_.begin(), may_jump_.end(), false);
  std::fill(caught_up_.begin(), caught_up_.end(), false);
}

void ClockTable::Rewind(int worker, int64_t clock) {
  if (worker < 0 || worker >= num_workers()) return;
  clocks_[worker] = std::min(clocks_[worker], clock);
  pushed_[worker] = std::min(pushed_[worker], clocks_[worker]);
  may_jump_[worker] = false;
  caught_up_[worker] = false;
}

bool ClockTable::CatchUp(int worker, int64_t clock) {
  if (worker < 0 || worker >= num_workers() || !may_jump_[worker] || clock <= clocks_[worker]) {
    return false;
  }
  clocks_[worker] = clock;
  may_jump_[worker] = false;
  caught_up_[worker] = true;
  return true;
}

void ClockTable::Finish(int worker, int64_t clock) {
  if (worker < 0 || worker >= num_workers() || clock < clocks_[worker]) return;
  pushed_[worker] = clock;  // its final read waited for every push
  if (clock == clocks_[worker]) return;
  clocks_[worker] = clock;
  may_jump_[worker] = false;
}

bool ClockTable::Resyncing() const {
  for (int w = 0; w < num_workers(); ++w) {
    if (may_jump_[w] && !removed_[w]) return true;
  }
  return false;
}

int64_t ClockTable::SlowestClock() const {
  int64_t min = INT64_MAX;
  for (size_t w = 0; w < clocks_.size(); ++w) {
    if (!removed_[w]) min = std::min(min, clocks_[w]);
  }
  return min == INT64_MAX ? 0 : min;
}

}  // namespace pstrain
