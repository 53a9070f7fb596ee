// The learning rate of an update as a function of its clock (formulas in
// proto/job.proto, LrSchedule).
#ifndef PSTRAIN_SERVER_LR_SCHEDULE_H_
#define PSTRAIN_SERVER_LR_SCHEDULE_H_

#include <cstdint>

#include "proto/job.pb.h"

namespace pstrain {

// Immutable; thread-safe.
class Schedule {
 public:
  // `spec` must be valid (ValidateJobSpec); `total_clocks` is the job's
  // length, the default end of the cosine decay.
  Schedule(const OptimizerSpec& spec, int64_t total_clocks);

  // The learning rate of an update from iteration `clock` (0-based).
  float At(int64_t clock) const;

 private:
  const LrSchedule spec_;
  const float lr_;
  const int64_t decay_clocks_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_LR_SCHEDULE_H_
