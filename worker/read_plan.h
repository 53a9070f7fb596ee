// Where each clock's weights come from, and what the clock waits on: the
// clock loop's read decisions (worker/clock_loop.h) with SSP's client cache.
//
// A read for iteration c must hold every live worker's updates of
// iterations < c - s (the read guarantee, min_clock). The weights at hand
// may hold that already (SSP: the cache serves, no read); or they came
// while the last clock computed (the prefetch, worker/weight_prefetch.h);
// or the pull goes out with the gate call (with overlap: the servers hold
// it until its guarantee holds); or after the gate opened.
#ifndef PSTRAIN_WORKER_READ_PLAN_H_
#define PSTRAIN_WORKER_READ_PLAN_H_

#include <cstdint>
#include <vector>

#include "common/job_spec.h"

namespace pstrain {

enum class WeightSource {
  kCache,          // the weights at hand: no read
  kPrefetch,       // pulled while the clock before computed
  kPullWithGate,   // pulled while the gate call goes on, awaited after it
  kPullAfterGate,  // pulled after the gate call (once it opened, when awaited)
};

// Not thread-safe: the loop's thread.
class ReadPlan {
 public:
  // `schedule` (the loop's, which the scheduler changes) outlives the plan;
  // `overlap`: the loop overlaps communication with compute; `stages`: a
  // pipeline's stages (1: none).
  ReadPlan(const ConsistencySchedule* schedule, bool overlap, int stages)
      : schedule_(schedule), overlap_(overlap), stages_(stages) {}

  // Where iteration `clock`'s weights come from, for a loop `connected` to
  // the servers or not yet (no clients, no cache), with a prefetch of
  // `clock` at hand or not.
  WeightSource Source(int64_t clock, bool connected, bool prefetched) const;
  // Whether a clock waits for its gate's answer before it computes. It
  // does not under any consistency: its pull's read guarantee is what
  // holds it back (under BSP the servers answer it once every live
  // worker's push of the clock before is applied, as in ps-lite), and the
  // answer is taken at the next clock's start, so a rollback, a new set of
  // live workers, a drain or a checkpoint asked for are seen one clock
  // late. Pipeline stages (whose neighbours' links the gate manages) and a
  // loop not yet connected wait.
  bool AwaitsGate(bool connected) const;
  // Whether to prefetch iteration `next` (< the job's end) while this
  // clock computes: unless the cache will serve it.
  bool Prefetches(int64_t next) const { return !CacheServes(next); }

  // Whether the weights at hand hold what a read for `clock` must (SSP
  // only: ASP's reads have no bound, so the cache would never be left, and
  // BSP's must hold the last clock's update).
  bool CacheServes(int64_t clock) const;
  // A read's weights hold, per worker w, its updates of iterations below
  // `applied[w]` (ParamClient::Pull); the cache keeps the least over the
  // `live` workers (unknown for one of them: no cache).
  void Note(const std::vector<int64_t>& applied, const std::vector<int>& live);
  // The weights at hand are of another generation: no cache.
  void Forget() { fresh_ = -1; }

 private:
  const ConsistencySchedule* const schedule_;
  const bool overlap_;
  const int stages_;
  int64_t fresh_ = -1;  // the cache's least applied iteration; -1: none
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_READ_PLAN_H_
