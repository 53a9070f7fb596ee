// The order in which one pipeline stage runs the forwards and backwards of a
// clock's micro-batches (GPipe: fill, then drain; 1F1B, PipeDream-flush:
// after a warm-up of P - stage - 1 forwards, one forward then one backward).
// A forward of micro-batch m on stage s needs stage s - 1's forward of m; a
// backward needs stage s + 1's backward of m. Both schedules run the
// backwards in the order of the forwards.
#ifndef PSTRAIN_WORKER_PIPELINE_SCHEDULE_H_
#define PSTRAIN_WORKER_PIPELINE_SCHEDULE_H_

#include <vector>

#include "proto/job.pb.h"

namespace pstrain {

struct PipeStep {
  enum Op { kForward, kBackward };
  Op op = kForward;
  int micro = 0;
  bool operator==(const PipeStep& o) const { return op == o.op && micro == o.micro; }
};

// Stage `stage` (0-based) of `stages`, `micro_batches` micro-batches: every
// forward and every backward once, each backward after its forward.
std::vector<PipeStep> StageSchedule(PipelineSchedule schedule, int stage, int stages,
                                    int micro_batches);

// The most micro-batches whose forward ran and backward did not yet, at
// once: the activations a stage must keep (GPipe M, 1F1B min(M, P - stage)).
int MaxInFlight(const std::vector<PipeStep>& steps);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_PIPELINE_SCHEDULE_H_
