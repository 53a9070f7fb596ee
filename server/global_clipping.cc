#include "server/global_clipping.h"

#include <cmath>
#include <utility>

#include "common/logging.h"
#include "common/status_macros.h"

namespace pstrain {

GlobalClipping::GlobalClipping(HeldRounds* store, float clip_norm, NormReducer reduce,
                               std::function<void()> on_applied)
    : store_(store),
      clip_norm_(clip_norm),
      reduce_(std::move(reduce)),
      on_applied_(std::move(on_applied)) {}

GlobalClipping::~GlobalClipping() { Stop(); }

std::unique_ptr<GlobalClipping> GlobalClipping::Start(HeldRounds* store, float clip_norm,
                                                      NormReducer reduce,
                                                      std::function<void()> on_applied) {
  if (!store->holds_rounds() || store->num_chunks() == 0) return nullptr;
  auto clipping =
      std::make_unique<GlobalClipping>(store, clip_norm, std::move(reduce), std::move(on_applied));
  store->SetRoundListener(clipping.get());
  clipping->thread_ = std::thread([c = clipping.get()] { c->Loop(); });
  return clipping;
}

void GlobalClipping::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
  store_->SetRoundListener(nullptr);
}

void GlobalClipping::RoundHeld() {
  absl::MutexLock lock(&mu_);
  ++held_chunks_;
}

void GlobalClipping::RoundsDropped() {
  absl::MutexLock lock(&mu_);
  held_chunks_ = 0;
}

bool GlobalClipping::ReadyOrStopping() const {
  return stopping_ || held_chunks_ == store_->num_chunks();
}

bool GlobalClipping::TakeRound() {
  absl::MutexLock lock(&mu_);
  if (held_chunks_ != store_->num_chunks()) return false;
  held_chunks_ = 0;
  return true;
}

void GlobalClipping::Loop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &GlobalClipping::ReadyOrStopping));
      if (stopping_) return;
      // Every chunk holds the round; none can close another before this
      // one is applied (the next round's pushes follow pulls that wait for
      // it), so the count can start again now.
      held_chunks_ = 0;
    }
    // An error from the store's memory: the server fails (its health()).
    if (!ClipRound().ok()) return;
  }
}

absl::Status GlobalClipping::ClipRound() {
  ASSIGN_OR_RETURN(const HeldRound round, store_->SumHeldSquares());
  absl::StatusOr<double> total = reduce_(round.generation, round.clock, round.sum_squares);
  if (!total.ok()) {
    // The cluster rolled back (the restore empties the round), or the job
    // ended (the server stops this thread).
    spdlog::warn("global clipping of round {} (generation {}) failed: {}", round.clock,
                 round.generation, total.status().message());
    return absl::OkStatus();
  }
  const double norm = std::sqrt(*total);
  const float scale = norm > clip_norm_ ? static_cast<float>(clip_norm_ / norm) : 1.0f;
  RETURN_IF_ERROR(store_->ApplyHeldRounds(round.generation, scale));
  on_applied_();
  return absl::OkStatus();
}

}  // namespace pstrain
