// ChunkStore's BSP rounds: a round closed (its sum made a mean and
// applied, or held for global clipping), a dead worker's round closed
// without it, and the held rounds' norms and application
// (server/global_clipping.h). See server/chunk_store.h.
#include <algorithm>

#include "common/logging.h"
#include "common/status_macros.h"
#include "server/chunk_store.h"
#include "server/round_sums.h"

namespace pstrain {

void ChunkStore::CloseRound(Chunk& c, const Slab& slab, bool averaged) {
  const int64_t n = c.layout.grad;
  if (c.round_samples == 0) {
    // Every push skipped: nothing is applied, and a held round's norm reads
    // zeros (written: an offloaded slab may be read back before that).
    std::fill(slab.grad(), slab.grad() + n, 0.0f);
    slab.MarkWritten();
  } else if (!averaged) {
    Scale(slab.grad(), n, 1.0f / static_cast<float>(c.round_samples + c.round_absent_samples),
          slab.grad());
    slab.MarkWritten();
  }
  if (!hold_rounds_) {
    ApplyRound(c, slab, 1.0f);
    return;
  }
  c.round_closed = true;
  absl::MutexLock lock(&listener_mu_);
  if (listener_ != nullptr) listener_->RoundHeld();
}

void ChunkStore::RemoveWorker(int worker) {
  standby_.RemoveWorker(worker, [&](StandbyPart& part) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    Chunk& c = static_cast<Chunk&>(part);  // standby_ holds chunks only
    if (!bsp_ || c.round_closed || !c.clocks.RoundComplete()) return;
    absl::StatusOr<Slab> slab = Pin(c);
    if (slab.ok()) CloseRound(c, *slab, /*averaged=*/false);  // else the server fails (health())
  });
  FlushShipped();
}

void ChunkStore::ApplyRound(Chunk& c, const Slab& slab, float scale) {
  const int64_t n = c.layout.grad;
  const int64_t clock = c.clocks.MinApplied();  // every live worker is in this round
  // Else every push of the round was skipped, or had no gradient.
  const bool stepped = c.round_samples > 0;
  if (stepped) {
    if (scale != 1.0f) Scale(slab.grad(), n, scale, slab.grad());
    Apply(c, slab, clock, slab.grad(), c.round_hyper.get());
  }
  // The sum is not zeroed: the next round's first push overwrites it (Accumulate).
  slab.MarkWritten();
  c.ClearRound();
  c.clocks.NextRound();
  Ship(c, clock, stepped ? slab.grad() : nullptr, c.round_hyper.get());
  for (int w = 0; w < num_workers_; ++w) {
    if (c.clocks.live(w)) TraceApply(w, c.clocks.applied()[w] - 1, c.id);
  }
  MaybeCheckpoint(c, slab);
}

void ChunkStore::SetRoundListener(Listener* listener) {
  absl::MutexLock lock(&listener_mu_);
  listener_ = listener;
}

absl::StatusOr<HeldRound> ChunkStore::SumHeldSquares() const {
  const size_t n = chunk_ids_.size();
  std::vector<double> sums(n, 0.0);
  std::vector<int64_t> clocks(n, 0);
  std::vector<absl::Status> errors(n);
  ForEachChunk([&](size_t k, Chunk& c) {
    absl::MutexLock lock(&c.mu);
    clocks[k] = c.clocks.MinApplied();
    absl::StatusOr<Slab> slab = Pin(c);
    if (!slab.ok()) {
      errors[k] = slab.status();
      return;
    }
    sums[k] = SumSquares(slab->grad(), c.layout.grad);
  });
  HeldRound round;
  round.generation = generation_;
  for (size_t k = 0; k < n; ++k) {  // in chunk order: the same sum whatever the threads
    RETURN_IF_ERROR(errors[k]);
    round.clock = clocks[k];
    round.sum_squares += sums[k];
  }
  return round;
}

absl::Status ChunkStore::ApplyHeldRounds(int64_t generation, float scale) {
  std::vector<absl::Status> errors(chunk_ids_.size());
  ForEachChunk([&](size_t k, Chunk& c) {
    absl::MutexLock lock(&c.mu);
    if (c.generation != generation) return;  // restored meanwhile
    absl::StatusOr<Slab> slab = Pin(c);
    if (!slab.ok()) {
      errors[k] = slab.status();
      return;
    }
    ApplyRound(c, *slab, scale);
  });
  FlushShipped();
  for (const absl::Status& st : errors) RETURN_IF_ERROR(st);
  return absl::OkStatus();
}

}  // namespace pstrain
