// Whether a worker pushes each parameter's gradient as soon as the backward
// has it, and under SSP and ASP prefetches the next clock's weights
// (TrainingOptions::overlap, --overlap): the one rule, for ps_worker and
// the PyTorch worker alike.
#ifndef PSTRAIN_WORKER_OVERLAP_H_
#define PSTRAIN_WORKER_OVERLAP_H_

#include <string>

#include "proto/job.pb.h"

namespace pstrain {

// `flag` on or off as given; auto: on for a CUDA device, under SSP and
// ASP (the prefetch takes the pull off the clock: bench/train_bench's MLP
// as fast as alone with it, 0.6-0.67 of that without), and under BSP for
// a worker whose forward waits for each layer's weights as they land
// (`layered_reads`: ps_worker, worker/weight_arrivals.h; the MLP's BSP
// 1 + 1 from 0.82 to 0.86 of alone); off under BSP on the CPU otherwise.
// Off whatever the flag when a clock needs its whole gradient before it
// pushes -- micro-batches above 1, fp16 loss scaling (`loss_scaling`),
// clipping by the push's norm under SSP or ASP -- and then *why_not (when
// given) says which; else it is left as is. `flag` is checked
// (worker/worker_flags.h).
bool DecideOverlap(const std::string& flag, const JobSpec& job, bool cuda, bool layered_reads,
                   bool loss_scaling, std::string* why_not = nullptr);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_OVERLAP_H_
