#include "worker/progress.h"

#include "absl/time/clock.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace pstrain {

Progress::Progress(const JobSpec& job, bool logs, bool evaluates, DataSource* data,
                   LoopStats* stats)
    : job_(job), logs_(logs), evaluates_(evaluates), data_(data), stats_(stats) {}

absl::StatusOr<ProgressNews> Progress::AfterClock(int64_t clock, int64_t total, Traffic traffic,
                                                  Model& model) {
  ProgressNews news;
  const bool epoch_end = (clock + 1) % ClocksPerEpoch(job_) == 0;
  if (stats_->window_clocks() == job_.log_every() || clock + 1 == total || epoch_end) {
    const WindowFigures w = stats_->EndWindow(traffic, job_.batch_size(), absl::Now());
    if (logs_) {
      spdlog::info(
          "clock {}/{} epoch {} loss {:.4f} samples/s {:.0f} (per clock: gate {:.1f} ms, "
          "pull {:.1f} ms, compute {:.1f} ms, push {:.1f} ms)",
          clock + 1, total, data_->Epoch(clock), w.mean_loss, w.samples_per_s, w.split.gate_ms(),
          w.split.pull_ms(), w.split.compute_ms(), w.split.push_ms());
    }
    news.window = w;
  }
  if (epoch_end && evaluates_ && clock + 1 < total) {
    const absl::Time t0 = absl::Now();
    ASSIGN_OR_RETURN(const double acc, data_->Evaluate(model));
    const absl::Time t1 = absl::Now();
    spdlog::info("epoch {} done: test accuracy {:.4f} (weights of clock {})", data_->Epoch(clock),
                 acc, clock);
    stats_->Evaluated(t0, t1);
    news.accuracy = acc;
  }
  return news;
}

}  // namespace pstrain
