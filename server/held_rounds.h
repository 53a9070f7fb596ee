// The seam between a store that holds its closed BSP rounds back and the
// protocol that releases them: under BSP with clipping by the global norm
// (the job's clip_norm > 0), a chunk whose round closes keeps the round's
// mean gradient instead of applying it, and GlobalClipping
// (server/global_clipping.h) applies every chunk's held round at once,
// scaled by the norm of the whole model's gradient. ChunkStore implements
// HeldRounds; tests use fakes.
#ifndef PSTRAIN_SERVER_HELD_ROUNDS_H_
#define PSTRAIN_SERVER_HELD_ROUNDS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pstrain {

// The round this server's chunks hold: its generation and clock, and the
// sum over the chunks of the squares of their mean gradients.
struct HeldRound {
  int64_t generation = 0;
  int64_t clock = 0;
  double sum_squares = 0;
};

// Thread-safe.
class HeldRounds {
 public:
  // Hears of the held rounds. Its calls come from pushing threads with a
  // chunk's lock held: they must not call back into the store.
  class Listener {
   public:
    virtual ~Listener() = default;
    // One more chunk holds its closed round.
    virtual void RoundHeld() = 0;
    // A restore emptied every chunk's round: no chunk holds one now.
    virtual void RoundsDropped() = 0;
  };

  virtual ~HeldRounds() = default;
  // Whether closed rounds are held (BSP with clip_norm > 0).
  virtual bool holds_rounds() const = 0;
  // The chunks that hold rounds: a round is complete once every one of
  // them holds it.
  virtual int num_chunks() const = 0;
  // `listener` hears of the rounds from now on (null: none). Call before
  // the first push; it must outlive the store or be unset first.
  virtual void SetRoundListener(Listener* listener) = 0;
  // The held round once every chunk holds it (the store's generation read
  // first). An error only from the store's memory (offloading).
  virtual absl::StatusOr<HeldRound> SumHeldSquares() const = 0;
  // Applies the held round of every chunk still of `generation`, its mean
  // scaled by `scale`, and opens the next round; chunks restored since are
  // left alone. An error only from the store's memory (offloading).
  virtual absl::Status ApplyHeldRounds(int64_t generation, float scale) = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_HELD_ROUNDS_H_
