// Per worker, how far one chunk has taken the worker's pushes: the
// iterations applied to it (the read guarantee's basis), under BSP whether
// the worker's push to the round being collected has come, and whether the
// worker is live (pushes the chunk and was not declared dead). The round
// being collected is MinApplied(). ChunkStore keeps one per chunk.
#ifndef PSTRAIN_SERVER_CHUNK_CLOCKS_H_
#define PSTRAIN_SERVER_CHUNK_CLOCKS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace pstrain {

// A value; thread-compatible (ChunkStore guards it with the chunk's lock).
class ChunkClocks {
 public:
  // `pushers[w]`: whether worker w pushes the chunk (the others are never
  // live). Every clock starts at 0.
  explicit ChunkClocks(std::vector<bool> pushers);

  // Per worker: iterations whose pushes are applied.
  const std::vector<int64_t>& applied() const { return applied_; }
  bool live(int worker) const { return live_[worker]; }
  // BSP: whether the worker's push is in the round being collected.
  bool pushed(int worker) const { return pushed_[worker]; }
  int num_workers() const { return static_cast<int>(applied_.size()); }

  // Min over live workers of the iterations applied (the max over every
  // worker when none is live).
  int64_t MinApplied() const;
  // BSP: every live worker has pushed to the current round (and one has).
  bool RoundComplete() const;
  // What a push of `clock` from `worker` is: OK for the worker's next push
  // (*duplicate false) or a repeat of one already taken (*duplicate true);
  // UNAVAILABLE for the first push applied at once (`at_once`, after a
  // switch from BSP) while the worker's push of the clock before waits in
  // an open round, and (`early_retried`: standby copies) for the push of
  // the clock after the one not yet applied; INVALID_ARGUMENT for any
  // other clock. `chunk` names the chunk in messages.
  absl::Status Classify(int worker, int64_t clock, int32_t chunk, bool at_once, bool* duplicate,
                        bool early_retried = false) const;

  // Standby copies: whether `worker`'s push of `clock` is the push of the
  // clock after one this chunk's open BSP round still waits for (its own
  // push of clock - 1 on its way, or a promoted copy's round cleared):
  // neither taken nor a repeat now, taken once that round is applied.
  bool Early(int worker, int64_t clock) const;
  // The worker's push of `clock` was applied at once (SSP, ASP).
  void Applied(int worker, int64_t clock) { applied_[worker] = clock + 1; }
  // BSP: the worker's push joined the round being collected.
  void Pushed(int worker) { pushed_[worker] = true; }
  // BSP: the round was applied; every live worker's applied clock moves
  // on (a dead worker's stays where it died) and the next round opens.
  void NextRound();
  // Standby copies: the applied clocks are `applied` (a primary's copy,
  // one per worker), the round being collected empty.
  void SetApplied(const std::vector<int64_t>& applied);
  // The worker is left out from now on. False if it already was.
  bool Remove(int worker);
  // A rollback to `clock`: every live worker's applied clock is `clock`
  // (a dead worker's no later), the round being collected empty.
  void Restore(int64_t clock);
  // The live workers behind `min_clock`: "worker 1 (56 applied)", and
  // under `bsp` whether its next push waits in the round. Empty when none.
  std::string Lagging(int64_t min_clock, bool bsp) const;

 private:
  std::vector<int64_t> applied_;
  std::vector<bool> pushed_;
  std::vector<bool> live_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_CHUNK_CLOCKS_H_
