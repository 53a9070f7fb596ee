// Stragglers a user can set (ps_worker --straggler): a delay a worker adds
// to each of its clocks, drawn from a stated distribution, so that the
// consistency models can be compared under slow workers (bench/
// consistency_experiment) and a cluster's behaviour checked under them.
// The delay of clock c is a function of (seed, worker, c) only, so a run
// repeats. The logic only: the clock loop sleeps it.
//
//   none                 no delay
//   fixed:MS             MS every clock
//   uniform:LO:HI        uniform in [LO, HI] ms
//   pareto:SCALE:SHAPE   heavy-tailed: SCALE / U^(1/SHAPE) ms (U uniform in
//                        (0, 1]): at least SCALE, median SCALE * 2^(1/SHAPE),
//                        infinite mean for SHAPE <= 1; capped at 60 s
//   ...@P                only a share P of the clocks (drawn), the others 0
//
// --straggler_workers=0,2 limits it to those workers (a persistently slow
// worker: fixed:MS for one of them); empty: every worker.
#ifndef PSTRAIN_WORKER_STRAGGLER_H_
#define PSTRAIN_WORKER_STRAGGLER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace pstrain {

struct StragglerSpec {
  enum class Kind { kNone, kFixed, kUniform, kPareto };
  Kind kind = Kind::kNone;
  double a_ms = 0;  // fixed: the delay; uniform: LO; pareto: SCALE
  double b_ms = 0;  // uniform: HI; pareto: SHAPE (no unit)
  double share = 1;  // of the clocks delayed, in (0, 1]
  std::vector<int> workers;  // empty: every worker
  uint64_t seed = 0;
};

// The longest delay drawn (a Pareto tail is capped here).
inline constexpr double kMaxStragglerMs = 60000;

// `text` as above, for `workers` ("0,2" or empty) and `seed`.
// INVALID_ARGUMENT naming the problem: an unknown distribution, a negative
// or non-finite delay, LO above HI, a shape <= 0, a share outside (0, 1],
// a delay above 60 s, a worker id that is not a number >= 0.
absl::StatusOr<StragglerSpec> ParseStraggler(absl::string_view text, absl::string_view workers,
                                             uint64_t seed);

// The delay worker `worker` adds to clock `clock`.
absl::Duration StragglerDelay(const StragglerSpec& spec, int worker, int64_t clock);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_STRAGGLER_H_
