// The clock loop's reports (worker/clock_loop.h), out of its core: after
// each clock, the progress line when a window of clocks ends (every
// job.log_every clocks, at each epoch's end and at the job's end), and the
// evaluation of the weights at an epoch's end. Figures come from LoopStats
// (worker/loop_stats.h).
#ifndef PSTRAIN_WORKER_PROGRESS_H_
#define PSTRAIN_WORKER_PROGRESS_H_

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "worker/data_source.h"
#include "worker/loop_stats.h"
#include "worker/models/model.h"

namespace pstrain {

// What a clock's end brought, for Status.
struct ProgressNews {
  std::optional<WindowFigures> window;  // a window ended
  std::optional<double> accuracy;       // the epoch's evaluation
};

// Not thread-safe: the loop's thread.
class Progress {
 public:
  // `job` complete and valid; `logs`: this worker logs the progress lines
  // (the one that knows the loss: worker 0, or the last stage of replica
  // 0); `evaluates`: it evaluates at each epoch's end (replica 0 with
  // --eval_each_epoch). `data` and `stats` outlive it.
  Progress(const JobSpec& job, bool logs, bool evaluates, DataSource* data, LoopStats* stats);

  // After clock `clock` (of `total`, the job's end as it stands; `traffic`:
  // the loop's so far) was counted in the stats (LoopStats::EndClock): the
  // window's line if it ends, and the epoch's evaluation of `model` if the
  // clock ends an epoch before the job's end.
  absl::StatusOr<ProgressNews> AfterClock(int64_t clock, int64_t total, Traffic traffic,
                                          Model& model);

 private:
  const JobSpec& job_;
  const bool logs_, evaluates_;
  DataSource* const data_;
  LoopStats* const stats_;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_PROGRESS_H_
