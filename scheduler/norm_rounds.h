// The scheduler's side of BSP clipping by the global norm: per clock, the
// servers' partial sums of squares and their total. Knows nothing of gRPC.
#ifndef PSTRAIN_SCHEDULER_NORM_ROUNDS_H_
#define PSTRAIN_SCHEDULER_NORM_ROUNDS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "absl/status/status.h"

namespace pstrain {

// Thread-compatible.
class NormRounds {
 public:
  // `reporters[s]`: whether server s reports (it holds chunks).
  NormRounds(std::vector<bool> reporters, int64_t total_clocks);

  // Server `server`'s part of round `clock`. A repeated report of the same
  // round is ignored (retries). INVALID_ARGUMENT for a server that does not
  // report, a clock outside [0, total), a sum that is not finite and >= 0,
  // or a round already forgotten.
  absl::Status Add(int server, int64_t clock, double sum_squares);
  // The total of round `clock` once every reporter has reported: the parts
  // added in server order, so every run (and a scheduler that took the job
  // over) gets the same bits.
  std::optional<double> Total(int64_t clock) const;
  // The reporters once an EXTERNAL model is declared (its chunks are
  // placed then); before the first round.
  void SetReporters(std::vector<bool> reporters);
  // Forgets every round (the cluster rolled back to `clock`; rounds from
  // there on are reported again).
  void Reset(int64_t clock);

 private:
  struct Round {
    std::vector<bool> reported;
    std::vector<double> parts;  // by server: summed in server order, whatever the arrival order
    int count = 0;
  };
  std::vector<bool> reporters_;
  int num_reporters_;
  const int64_t total_clocks_;
  std::map<int64_t, Round> rounds_;
  int64_t forgotten_before_ = 0;  // rounds below this are dropped
};

}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_NORM_ROUNDS_H_
