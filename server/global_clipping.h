// A server's side of BSP clipping by the global norm, a protocol across the
// servers: every chunk of the store holds its closed round (HeldRounds,
// server/held_rounds.h); once all of them hold it, the server's sum of
// squares goes to `reduce`, which answers the sum over every server (the
// scheduler's norm rounds, scheduler/norm_rounds.h; in a standalone worker
// the local sum is the sum), and the store applies the round scaled by
// min(1, clip_norm / norm). Until then the round's read guarantee does not
// hold; `on_applied` then wakes the pulls that wait for it. Knows nothing of
// gRPC.
#ifndef PSTRAIN_SERVER_GLOBAL_CLIPPING_H_
#define PSTRAIN_SERVER_GLOBAL_CLIPPING_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/held_rounds.h"

namespace pstrain {

// The sum of squares over every server of round `clock` of `generation`,
// given this server's part; an error when the round cannot be reduced (the
// cluster rolled back, or the job ended).
using NormReducer =
    std::function<absl::StatusOr<double>(int64_t generation, int64_t clock, double sum_squares)>;

// Thread-safe. Listens to the store's held rounds once it is its listener.
class GlobalClipping : public HeldRounds::Listener {
 public:
  // Clips `store`'s rounds (which outlives this) by `clip_norm`.
  GlobalClipping(HeldRounds* store, float clip_norm, NormReducer reduce,
                 std::function<void()> on_applied);
  // Stops the thread.
  ~GlobalClipping() override;

  // When `store` holds rounds and chunks: a GlobalClipping listening to it,
  // its thread started; else null (nothing to clip). Call before the first
  // push.
  static std::unique_ptr<GlobalClipping> Start(HeldRounds* store, float clip_norm,
                                               NormReducer reduce,
                                               std::function<void()> on_applied);
  // Stops the thread (waits for a round being reduced) and unsets the
  // store's listener. Idempotent. The thread also stops when the store's memory fails (the
  // server then fails on the store's health()).
  void Stop();

  void RoundHeld() override;
  void RoundsDropped() override;

  // When every chunk holds the round: counts the chunks again from 0 and
  // returns true (the thread's wake-up; tests call it in its place).
  bool TakeRound();
  // One round on the calling thread, the thread's body once it took one:
  // reduces the store's sum of squares and has the store apply the round
  // scaled. A failed reduction is logged and the round stays held (a
  // rollback empties it); an error only from the store's memory.
  absl::Status ClipRound();

 private:
  void Loop();
  bool ReadyOrStopping() const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  HeldRounds* const store_;
  const float clip_norm_;
  const NormReducer reduce_;
  const std::function<void()> on_applied_;
  mutable absl::Mutex mu_;
  int64_t held_chunks_ ABSL_GUARDED_BY(mu_) = 0;  // chunks holding the current round
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_GLOBAL_CLIPPING_H_
