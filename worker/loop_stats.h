// The clock loop's accounting (worker/clock_loop.h): where each clock's
// time went (gate, pull, compute, push), the calls made (the gate's and the
// servers') and the payload bytes moved, summed per progress window and
// over the run, and turned into per-clock figures (ClockSplit) for the
// progress line and Status. Times come in as arguments (no clock read
// here), so tests give their own.
#ifndef PSTRAIN_WORKER_LOOP_STATS_H_
#define PSTRAIN_WORKER_LOOP_STATS_H_

#include <array>
#include <cstdint>
#include <optional>

#include "absl/time/time.h"
#include "proto/status.pb.h"
#include "worker/param_client.h"

namespace pstrain {

// Where a clock's (or a sum of clocks') time went.
struct ClockTimes {
  absl::Duration gate, pull, compute, push;
  void Add(const ClockTimes& o) {
    gate += o.gate, pull += o.pull, compute += o.compute, push += o.push;
  }
};

// Calls (the gate's and the servers') and payload bytes, so far.
struct Traffic {
  int64_t calls = 0;
  int64_t bytes = 0;
};

// A window of clocks, for the progress line: its mean loss, its training
// samples per second and its per-clock split.
struct WindowFigures {
  int64_t clocks = 0;
  double mean_loss = 0;
  double samples_per_s = 0;
  ClockSplit split;
};

// The run so far, from the end of its first clock (which waited for the
// cluster to be complete): seconds training (evaluations left out), clocks,
// per-clock split.
struct RunFigures {
  double train_s = 0;
  int64_t clocks = 0;
  ClockSplit split;
};

// Not thread-safe: the loop's thread.
class LoopStats {
 public:
  // The first window starts at `now`.
  explicit LoopStats(absl::Time now) : window_start_(now) {}

  // A gate call to count (a gate in this process is not counted).
  void CountGateCall() { ++gates_; }
  // `client` is being replaced (a rollback): what it counted stays.
  void Retire(const ParamClient& client);
  // The traffic so far, with `current` the client in use (null: none).
  Traffic Total(const ParamClient* current) const;

  // This clock's times, added to as it goes.
  ClockTimes& clock() { return clock_; }

  // Ends the clock, of `loss`, at `now` with `traffic` so far: its times
  // join the window's and the run's. The run's figures, from the second
  // clock on (nullopt for the first, which starts the run).
  std::optional<RunFigures> EndClock(double loss, Traffic traffic, absl::Time now);
  // The mean loss of the last kRecentClocks clocks ended (of those there
  // were, 0 before the first): what Status reports, a loss a reader
  // sampling now and then can plot without one batch's noise.
  static constexpr int kRecentClocks = 16;
  double recent_loss() const;
  // Clocks in the window so far.
  int64_t window_clocks() const { return window_clocks_; }
  // Ends the window at `now` with `traffic` so far (clocks of `batch_size`
  // samples); the next starts. REQUIRES: window_clocks() > 0.
  WindowFigures EndWindow(Traffic traffic, int batch_size, absl::Time now);
  // An evaluation ran from `start` to `end`: not training time (left out of
  // the run's seconds; the next window starts at its end).
  void Evaluated(absl::Time start, absl::Time end);

 private:
  // `times` over n clocks, with `traffic` in them, per clock.
  static ClockSplit PerClock(const ClockTimes& times, Traffic traffic, double n);

  ClockTimes clock_;
  // The last kRecentClocks losses, clock c's at c % kRecentClocks, and the
  // clocks ended.
  std::array<double, kRecentClocks> recent_{};
  int64_t ended_ = 0;
  // The progress window: its start, clocks, summed loss, times, and the
  // traffic at its start.
  absl::Time window_start_;
  int64_t window_clocks_ = 0;
  double window_loss_ = 0;
  ClockTimes window_;
  Traffic window_traffic_;
  // The run: its start (the end of its first clock), time spent
  // evaluating, clocks, times, and the traffic at its start.
  std::optional<absl::Time> run_start_;
  absl::Duration run_evaluating_;
  int64_t run_clocks_ = 0;
  ClockTimes run_;
  Traffic run_traffic_;
  // Gate calls, and what clients since replaced had counted.
  int64_t gates_ = 0, calls_retired_ = 0, bytes_retired_ = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_LOOP_STATS_H_
