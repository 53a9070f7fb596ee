// A job's curves over time, sampled from the cluster's Status: the
// dashboard's loss, accuracy and throughput plots, and --run_dir's
// curves.jsonl. No gRPC; the scheduler's runtime feeds it.
#ifndef PSTRAIN_SCHEDULER_RUN_HISTORY_H_
#define PSTRAIN_SCHEDULER_RUN_HISTORY_H_

#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/dashboard.pb.h"
#include "proto/status.pb.h"

namespace pstrain {

class RunHistory {
 public:
  static constexpr size_t kMaxPoints = 1000;

  // `run_dir` empty: keep the points in memory only. Otherwise every point
  // is also appended to run_dir/curves.jsonl (one JSON object a line).
  static absl::StatusOr<std::unique_ptr<RunHistory>> Open(const std::string& run_dir);
  ~RunHistory();

  // Adds a point when the slowest worker's clock moved since the last one,
  // a worker died or came back, or an evaluation (test accuracy,
  // validation loss) changed, once a worker has trained a clock. When the memory holds kMaxPoints,
  // every other point is dropped: the curve keeps its whole span at half the resolution. The file
  // keeps every point.
  void Record(const ClusterStatus& status, int64_t unix_ms);
  std::vector<RunPoint> Points() const;

  // The point a Status makes (exposed for tests).
  static RunPoint PointOf(const ClusterStatus& status, int64_t unix_ms);

 private:
  explicit RunHistory(std::FILE* file) : file_(file) {}

  mutable absl::Mutex mu_;
  std::vector<RunPoint> points_ ABSL_GUARDED_BY(mu_);
  std::FILE* const file_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_RUN_HISTORY_H_
