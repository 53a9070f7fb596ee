// When a part of a server's state -- a chunk, a table -- writes its
// checkpoint: once its clock (every live worker's updates applied) reaches
// a multiple of `every`, or the clock the scheduler asked for outside the
// schedule (psctl checkpoint and drain, carried by the workers' pushes as
// PushRequest.checkpoint_clock), once per clock; and a failed write
// logged once for all of them. One rule for the chunks and the tables
// (server/shard.h owns it). No I/O.
#ifndef PSTRAIN_SERVER_CHECKPOINT_SCHEDULE_H_
#define PSTRAIN_SERVER_CHECKPOINT_SCHEDULE_H_

#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace pstrain {

// Thread-safe.
class CheckpointSchedule {
 public:
  // `every` clocks (0: no checkpoints).
  explicit CheckpointSchedule(int64_t every) : every_(every) {}

  bool enabled() const { return every_ > 0; }
  // A checkpoint of `clock` was asked for (the newest one counts); true
  // when it is newer than the one asked for before.
  bool Ask(int64_t clock) {
    int64_t asked = asked_.load(std::memory_order_relaxed);
    while (clock > asked) {
      if (asked_.compare_exchange_weak(asked, clock)) return true;
    }
    return false;
  }
  // A rollback: what was asked is forgotten (the workers ask again).
  void Forget() { asked_.store(0, std::memory_order_relaxed); }
  // Whether a part now at `clock`, whose newest checkpoint written (or
  // tried) is of `last`, writes one of `clock`.
  bool Due(int64_t clock, int64_t last) const {
    if (every_ <= 0 || clock <= 0 || clock <= last) return false;
    return clock % every_ == 0 || clock == asked_.load(std::memory_order_relaxed);
  }
  // `part`'s (a chunk's or table's name) write of `clock` failed with `st`:
  // logged the first time only (the server's Status reports the clock it
  // has complete).
  void Failed(absl::string_view part, int64_t clock, const absl::Status& st) const;

 private:
  const int64_t every_;
  std::atomic<int64_t> asked_{0};
  mutable std::atomic<bool> failure_logged_{false};
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_CHECKPOINT_SCHEDULE_H_
