// The server-side optimizer interface. One file per optimizer in
// server/optimizers/, each header with its update formulas; MakeOptimizer
// picks one from the job spec.
#ifndef PSTRAIN_SERVER_OPTIMIZER_H_
#define PSTRAIN_SERVER_OPTIMIZER_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "common/thread_pool.h"
#include "proto/job.pb.h"

namespace pstrain {

// The elements of one chunk as a rows x cols matrix. rows > 1 only when the
// chunk holds whole rows of a 2-D parameter; a vector is 1 x n.
struct ChunkShape {
  int64_t rows = 1;
  int64_t cols = 0;
  int64_t numel() const { return rows * cols; }
};

// What one update needs besides the arrays.
struct UpdateContext {
  int64_t step = 1;  // this chunk's updates so far, this one included (bias correction)
  float lr = 0;      // the schedule's learning rate for this update
};

// Stateless apart from its hyper-parameters; thread-safe. The state lives
// with the chunk it belongs to and starts at zero.
class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // Floats of state a chunk of this shape needs.
  virtual int64_t StateFloats(const ChunkShape& shape) const = 0;

  // One update of a chunk: weights `w`, gradient `g` (shape.numel() each),
  // state (StateFloats(shape)). May split the work over `pool`; allocates
  // nothing. `w` and `state` must not overlap `g`.
  virtual void Update(const UpdateContext& ctx, const ChunkShape& shape, float* w, float* state,
                      const float* g, ThreadPool* pool) const = 0;
};

// Floats between an elementwise optimizer's state arrays (and, in a
// server's slab, between the weights, the state and the round's sum): arrays
// whose addresses agree modulo 4 KiB make the CPU take a load for a
// dependence on an earlier store of another array (4K aliasing), which cost
// Adam two thirds of its speed (bench/optimizer_bench).
inline constexpr int64_t kArrayGap = 32;

// An optimizer whose update of element i reads only element i of each array:
// its state is Arrays() arrays of numel() floats, kArrayGap apart, and Update
// splits the chunk into ranges over the pool.
class ElementwiseOptimizer : public Optimizer {
 public:
  int64_t StateFloats(const ChunkShape& shape) const final {
    return Arrays() * (shape.numel() + kArrayGap);
  }
  void Update(const UpdateContext& ctx, const ChunkShape& shape, float* w, float* state,
              const float* g, ThreadPool* pool) const final;
  // Its state arrays per element (Adam: 2, m and v).
  int arrays() const { return Arrays(); }

 protected:
  virtual int Arrays() const = 0;
  // Updates n elements; state array k of element i is state[k * stride + i].
  virtual void UpdateRange(const UpdateContext& ctx, float* w, float* state, int64_t stride,
                           const float* g, int64_t n) const = 0;
};

// Elements a pool thread takes at least. Below this, waking a thread costs
// more than it saves (a 1 MiB chunk's Adam update takes ~50 us here); pushes
// of different chunks already run in parallel on gRPC's threads.
inline constexpr int64_t kMinUpdateGrain = 1 << 20;

absl::StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(const OptimizerSpec& spec);

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_OPTIMIZER_H_
