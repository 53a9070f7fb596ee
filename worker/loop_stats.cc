#include "worker/loop_stats.h"

#include <algorithm>

namespace pstrain {

void LoopStats::Retire(const ParamClient& client) {
  calls_retired_ += client.rpcs();
  bytes_retired_ += client.bytes_in() + client.bytes_out();
}

Traffic LoopStats::Total(const ParamClient* current) const {
  Traffic t;
  t.calls = gates_ + calls_retired_ + (current != nullptr ? current->rpcs() : 0);
  t.bytes = bytes_retired_ + (current != nullptr ? current->bytes_in() + current->bytes_out() : 0);
  return t;
}

double LoopStats::recent_loss() const {
  const int64_t n = std::min<int64_t>(ended_, kRecentClocks);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += recent_[i];
  return n > 0 ? sum / static_cast<double>(n) : 0;
}

std::optional<RunFigures> LoopStats::EndClock(double loss, Traffic traffic, absl::Time now) {
  recent_[ended_++ % kRecentClocks] = loss;
  window_loss_ += loss;
  ++window_clocks_;
  window_.Add(clock_);
  const ClockTimes clock = clock_;
  clock_ = ClockTimes();
  if (!run_start_.has_value()) {
    // The first clock waited for the cluster to be complete: left out.
    run_start_ = now;
    run_traffic_ = traffic;
    return std::nullopt;
  }
  run_.Add(clock);
  ++run_clocks_;
  RunFigures run;
  run.train_s = absl::ToDoubleSeconds(now - *run_start_ - run_evaluating_);
  run.clocks = run_clocks_;
  run.split =
      PerClock(run_, {traffic.calls - run_traffic_.calls, traffic.bytes - run_traffic_.bytes},
               static_cast<double>(run_clocks_));
  return run;
}

WindowFigures LoopStats::EndWindow(Traffic traffic, int batch_size, absl::Time now) {
  WindowFigures w;
  w.clocks = window_clocks_;
  const double n = static_cast<double>(window_clocks_);
  const double secs = absl::ToDoubleSeconds(now - window_start_);
  w.mean_loss = window_loss_ / n;
  w.samples_per_s = secs > 0 ? n * batch_size / secs : 0;
  w.split = PerClock(
      window_, {traffic.calls - window_traffic_.calls, traffic.bytes - window_traffic_.bytes}, n);
  window_traffic_ = traffic;
  window_start_ = now;
  window_clocks_ = 0;
  window_loss_ = 0;
  window_ = ClockTimes();
  return w;
}

void LoopStats::Evaluated(absl::Time start, absl::Time end) {
  run_evaluating_ += end - start;
  window_start_ = end;  // samples/s counts training only
}

ClockSplit LoopStats::PerClock(const ClockTimes& times, Traffic traffic, double n) {
  ClockSplit c;
  c.set_gate_ms(absl::ToDoubleMilliseconds(times.gate) / n);
  c.set_pull_ms(absl::ToDoubleMilliseconds(times.pull) / n);
  c.set_compute_ms(absl::ToDoubleMilliseconds(times.compute) / n);
  c.set_push_ms(absl::ToDoubleMilliseconds(times.push) / n);
  c.set_rpcs(static_cast<double>(traffic.calls) / n);
  c.set_bytes(static_cast<double>(traffic.bytes) / n);
  return c;
}

}  // namespace pstrain
