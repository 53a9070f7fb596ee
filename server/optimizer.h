// The server-side optimizer interface. One file per optimizer in
// server/optimizers/; MakeOptimizer picks one from the job spec.
#ifndef PSTRAIN_SERVER_OPTIMIZER_H_
#define PSTRAIN_SERVER_OPTIMIZER_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"

namespace pstrain {

// Stateless apart from its hyper-parameters; thread-safe. The per-element
// state lives with the chunk it belongs to.
class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // Floats of state per parameter element (0 for SGD, 1 for momentum, 2 for
  // Adam). State starts at zero.
  virtual int StateSlots() const = 0;

  // One update of `n` elements: weights `w`, gradient `g`, state laid out as
  // StateSlots() arrays of `n` floats each. `step` counts this chunk's
  // updates from 1 (Adam's bias correction).
  virtual void Update(float* w, float* state, const float* g, int64_t n,
                      int64_t step) const = 0;
};

absl::StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(const OptimizerSpec& spec);

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_OPTIMIZER_H_
