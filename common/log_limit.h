// A rate limit for log lines that anyone can provoke -- a connect refused
// on a socket every user can reach, a NaN a buggy script pushes at every
// clock -- so that a flood of them cannot fill a disk or bury the lines
// that matter: at most `burst` lines in each `period`; those held back are
// counted, and the next line that goes out says how many there were.
// The events themselves are counted where they happen (Status, metrics):
// the limit drops lines, never facts. No I/O.
#ifndef PSTRAIN_COMMON_LOG_LIMIT_H_
#define PSTRAIN_COMMON_LOG_LIMIT_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace pstrain {

// Thread-safe.
class LogLimit {
 public:
  explicit LogLimit(int burst = 5, absl::Duration period = absl::Minutes(1))
      : burst_(burst), period_(period) {}

  // Whether a line may go out at `now`. When it may, *held_back receives
  // the lines held back since the last one that went out (to say so in
  // it), and the count starts again.
  bool Allow(int64_t* held_back, absl::Time now = absl::Now());

  // Lines held back since the last one that went out.
  int64_t held_back() const;

 private:
  const int burst_;
  const absl::Duration period_;
  mutable absl::Mutex mu_;
  absl::Time window_start_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int in_window_ ABSL_GUARDED_BY(mu_) = 0;   // lines that went out in this window
  int64_t held_back_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_LOG_LIMIT_H_
