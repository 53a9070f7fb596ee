// What the weights a pull read hold (PullResponse.applied_clock,
// .own_applied_most, .own_held_least): a server's chunk fills one as it is
// read (server/chunk_store.h), a reply's are the chunks' merged, and the
// worker merges its replies'. No I/O.
#ifndef PSTRAIN_COMMON_PULLED_CLOCKS_H_
#define PSTRAIN_COMMON_PULLED_CLOCKS_H_

#include <cstdint>
#include <limits>
#include <vector>

namespace pstrain {

// A value; over the chunks read.
struct PulledClocks {
  // Per worker, the iterations whose updates every chunk holds applied.
  std::vector<int64_t> applied;
  // Of the pulling worker's own pushes: the most iterations applied to any
  // chunk, and the fewest that every chunk holds (applied, or in the BSP
  // round being collected).
  int64_t own_applied_most = -1;
  int64_t own_held_least = std::numeric_limits<int64_t>::max();

  // Takes in another part of the same pull's (the fewest applied, ...).
  void Merge(const PulledClocks& other);
  // Whether a worker that computes clock `clock` from these weights, as a
  // replacement redoing a clock its dead predecessor pushed, cannot make
  // that push again as it was: some chunk already applied it (its weights
  // are newer than the clock) while another still lacks it and would take
  // the new one. (A worker's own pushes of its clock are never applied
  // when it reads that clock's weights: false for any other worker.)
  bool RedoIsInexact(int64_t clock) const {
    return own_applied_most > clock && own_held_least <= clock;
  }
};

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_PULLED_CLOCKS_H_
