#include "worker/pipeline_schedule.h"

#include <algorithm>

namespace pstrain {

std::vector<PipeStep> StageSchedule(PipelineSchedule schedule, int stage, int stages,
                                    int micro_batches) {
  std::vector<PipeStep> steps;
  const int m = micro_batches;
  // GPipe warms up with every forward; 1F1B with as many as the stages after
  // this one need to fill the pipe.
  const int warmup = schedule == GPIPE ? m : std::min(stages - stage - 1, m);
  for (int i = 0; i < warmup; ++i) steps.push_back({PipeStep::kForward, i});
  int backward = 0;
  for (int i = warmup; i < m; ++i) {
    steps.push_back({PipeStep::kForward, i});
    steps.push_back({PipeStep::kBackward, backward++});
  }
  while (backward < m) steps.push_back({PipeStep::kBackward, backward++});
  return steps;
}

int MaxInFlight(const std::vector<PipeStep>& steps) {
  int in_flight = 0, most = 0;
  for (const PipeStep& s : steps) {
    in_flight += s.op == PipeStep::kForward ? 1 : -1;
    most = std::max(most, in_flight);
  }
  return most;
}

}  // namespace pstrain
