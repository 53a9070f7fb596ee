#include "scheduler/norm_rounds.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace {

// Rounds kept after a newer one completes, for late retries.
constexpr int64_t kKeptRounds = 4;

}  // namespace

void NormRounds::SetReporters(std::vector<bool> reporters) {
  reporters_ = std::move(reporters);
  num_reporters_ = static_cast<int>(std::count(reporters_.begin(), reporters_.end(), true));
}

NormRounds::NormRounds(std::vector<bool> reporters, int64_t total_clocks)
    : reporters_(std::move(reporters)),
      num_reporters_(static_cast<int>(std::count(reporters_.begin(), reporters_.end(), true))),
      total_clocks_(total_clocks) {}

absl::Status NormRounds::Add(int server, int64_t clock, double sum_squares) {
  if (server < 0 || server >= static_cast<int>(reporters_.size()) || !reporters_[server]) {
    return absl::InvalidArgumentError(absl::StrCat("server ", server, " holds no chunks"));
  }
  if (clock < forgotten_before_ || clock >= total_clocks_) {
    return absl::InvalidArgumentError(absl::StrCat("norm of round ", clock, " outside [",
                                                   forgotten_before_, ", ", total_clocks_, ")"));
  }
  if (!std::isfinite(sum_squares) || sum_squares < 0) {
    return absl::InvalidArgumentError(absl::StrCat("sum of squares ", sum_squares));
  }
  Round& r = rounds_[clock];
  if (r.reported.empty()) {
    r.reported.assign(reporters_.size(), false);
    r.parts.assign(reporters_.size(), 0.0);
  }
  if (r.reported[server]) return absl::OkStatus();
  r.reported[server] = true;
  r.parts[server] = sum_squares;
  if (++r.count == num_reporters_) {
    forgotten_before_ = std::max(forgotten_before_, clock - kKeptRounds);
    rounds_.erase(rounds_.begin(), rounds_.lower_bound(forgotten_before_));
  }
  return absl::OkStatus();
}

void NormRounds::Reset(int64_t clock) {
  rounds_.clear();
  forgotten_before_ = clock;
}

std::optional<double> NormRounds::Total(int64_t clock) const {
  auto it = rounds_.find(clock);
  if (it == rounds_.end() || it->second.count < num_reporters_) return std::nullopt;
  double sum = 0;
  for (double part : it->second.parts) sum += part;
  return sum;
}

}  // namespace pstrain
