// ChunkStore's standby (JobSpec.standby_copies): each served chunk's changes
// shipped to its standby in order (Ship), the standby's confirmations
// (Confirmed, Replicated), and a standby copy taking its primary's changes
// (Mirror): an update is applied with the very optimizer step the primary
// took, so the copy stays bit for bit the primary's (an elementwise
// optimizer's: Adafactor's sums are refused, common/job_validate.cc). See
// server/chunk_store.h; the roles and what every part does alike are
// server/standby_parts.h's.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/job_optimizer.h"
#include "common/job_spec.h"
#include "common/status_macros.h"
#include "server/chunk_store.h"

namespace pstrain {
namespace {

std::string FloatBytes(const float* values, int64_t n) {
  return std::string(reinterpret_cast<const char*>(values), n * sizeof(float));
}

}  // namespace

void ChunkStore::SetChunkSink(ChunkSink* sink) { sink_ = sink; }

void ChunkStore::FlushShipped() const {
  if (ChunkSink* sink = sink_.load(); sink != nullptr) sink->Flush();
}

void ChunkStore::Ship(Chunk& c, int64_t clock, const float* grad, const OptimizerSpec* hyper,
                      bool full) {
  ChunkSink* sink = sink_.load();
  switch (c.standby.Changed(sink != nullptr, full, c.clocks.applied())) {
    case StandbyState::Ship::kNothing:
      return;
    case StandbyState::Ship::kWhole:  // not a step the standby could take
      sink->NeedWhole(c.home, c.id);
      return;
    case StandbyState::Ship::kChange:
      break;
  }
  ChunkUpdate u;
  u.set_chunk(c.id);
  u.set_version(c.standby.version);
  u.set_clock(clock);
  if (grad != nullptr) u.set_grad(FloatBytes(grad, c.layout.weights));
  if (hyper != nullptr) {
    *u.mutable_hyper() = *hyper;
  }
  for (int64_t a : c.clocks.applied()) u.add_applied(a);
  sink->Changed(c.home, std::move(u));
}

int ChunkStore::HomeOf(int32_t chunk) const {
  const Chunk* c = Find(chunk);
  return c == nullptr ? -1 : c->home;
}

absl::Status ChunkStore::CheckServed(int32_t chunk) const {
  const Chunk* c = Find(chunk);
  if (c == nullptr) return CheckChunk(chunk);
  absl::MutexLock lock(&c->mu);
  if (c->standby.serving) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("server ", server_id_,
                                             " keeps a standby copy of chunk ", chunk,
                                             "; another server serves it now"));
}

bool ChunkStore::Replicated(int32_t chunk, int worker, int64_t clock) const {
  const Chunk* c = Find(chunk);
  if (c == nullptr || job_.standby_copies() == 0) return true;
  absl::MutexLock lock(&c->mu);
  return c->standby.Holds(worker, clock);
}

bool ChunkStore::PushEarly(int worker, int64_t clock, int64_t generation,
                           const std::vector<int32_t>& chunks) const {
  if (job_.standby_copies() == 0 || generation != generation_ || worker < 0 ||
      worker >= num_workers_) {
    return false;
  }
  bool early = false;
  for (int32_t id : chunks) {
    const Chunk* c = Find(id);
    if (c == nullptr) return false;
    absl::MutexLock lock(&c->mu);
    if (c->generation != generation || !c->standby.serving || !c->pushers[worker] ||
        !c->clocks.live(worker)) {
      return false;  // refused as any push is
    }
    early = early || c->clocks.Early(worker, clock);
  }
  return early;
}

void ChunkStore::Confirmed(int32_t chunk, int64_t version, const std::vector<int64_t>& applied) {
  Chunk* c = Find(chunk);
  if (c == nullptr) return;
  absl::MutexLock lock(&c->mu);
  c->standby.Confirm(version, applied);
}

absl::StatusOr<ChunkUpdate> ChunkStore::FullUpdate(int32_t chunk) const {
  ChunkUpdate u;
  std::string weights, state;
  RETURN_IF_ERROR(WholeState(chunk, &u, [&](int64_t weight_bytes, int64_t state_bytes) {
    weights.resize(weight_bytes);
    state.resize(state_bytes);
    return WholeRoom{weights.data(), state.data()};
  }));
  u.set_weights(std::move(weights));
  u.set_state(std::move(state));
  return u;
}

absl::Status ChunkStore::WholeState(
    int32_t chunk, ChunkUpdate* meta,
    absl::FunctionRef<WholeRoom(int64_t weight_bytes, int64_t state_bytes)> room) const {
  const Chunk* c = Find(chunk);
  if (c == nullptr) return CheckChunk(chunk);
  absl::MutexLock lock(&c->mu);
  if (!c->standby.serving) return absl::FailedPreconditionError("not served here");
  ASSIGN_OR_RETURN(const Slab slab, Pin(*c));
  meta->set_chunk(chunk);
  meta->set_version(c->standby.version);
  meta->set_full(true);
  meta->set_steps(c->steps);
  meta->set_has_values(c->has_values);
  for (int64_t a : c->clocks.applied()) meta->add_applied(a);
  const int64_t weight_bytes = c->layout.weights * sizeof(float);
  // The state arrays as the slab lays them out (with their gaps).
  const int64_t state_bytes = c->layout.state * sizeof(float);
  const WholeRoom to = room(weight_bytes, state_bytes);
  std::memcpy(to.weights, slab.weights(), weight_bytes);
  std::memcpy(to.state, slab.state(), state_bytes);
  return absl::OkStatus();
}

int64_t ChunkStore::WholeBytes(int32_t chunk) const {
  const Chunk* c = Find(chunk);
  return c == nullptr ? 0 : (c->layout.weights + c->layout.state) * int64_t{sizeof(float)};
}

absl::Status ChunkStore::PutWhole(Chunk& c, const Slab& slab, const ChunkUpdate& u) {
  const int64_t w = c.layout.weights, st = c.layout.state;
  if (u.weights().size() != w * sizeof(float) || u.state().size() != st * sizeof(float) ||
      u.steps() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk ", c.id, "'s whole state has another size"));
  }
  std::memcpy(slab.weights(), u.weights().data(), u.weights().size());
  std::memcpy(slab.state(), u.state().data(), u.state().size());
  slab.MarkWritten();
  c.steps = u.steps();
  c.has_values = u.has_values();
  return absl::OkStatus();
}

absl::Status ChunkStore::TakeFull(Chunk& c, const ChunkUpdate& u) {
  ASSIGN_OR_RETURN(const Slab slab, Pin(c));
  RETURN_IF_ERROR(Prefixed("replicate: ", PutWhole(c, slab, u)));
  c.clocks.SetApplied({u.applied().begin(), u.applied().end()});
  c.standby.version = u.version();
  MaybeCheckpoint(c, slab);
  return absl::OkStatus();
}

absl::Status ChunkStore::CheckUpdate(const ChunkUpdate& u) const {
  if (u.applied_size() != num_workers_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replicate: ", u.applied_size(), " applied clocks for ", num_workers_, " workers"));
  }
  const int64_t total = TotalClocks(job_);
  for (int64_t a : u.applied()) {
    if (a < 0 || a > total) {
      return absl::InvalidArgumentError(
          absl::StrCat("replicate: applied clock ", a, " outside [0, ", total, "]"));
    }
  }
  if (u.clock() < 0 || u.clock() > total || u.version() < 0 || u.steps() < 0) {
    return absl::InvalidArgumentError("replicate: a clock, version or step count out of range");
  }
  if (u.has_hyper()) RETURN_IF_ERROR(WithHyper(job_.optimizer(), u.hyper()).status());
  return absl::OkStatus();
}

absl::Status ChunkStore::Mirror(const ChunkUpdate& u, absl::Span<const float> grad,
                                bool* need_full) {
  *need_full = false;
  Chunk* c = Find(u.chunk());
  if (c == nullptr) return CheckChunk(u.chunk());
  RETURN_IF_ERROR(CheckUpdate(u));
  absl::MutexLock lock(&c->mu);
  if (c->standby.serving) {
    return absl::FailedPreconditionError(
        absl::StrCat("replicate: server ", server_id_, " serves chunk ", u.chunk(), " itself"));
  }
  switch (c->standby.TakeOf(u.version(), u.full())) {
    case StandbyState::Take::kHeld:
      return absl::OkStatus();
    case StandbyState::Take::kNeedWhole:
      *need_full = true;
      return absl::OkStatus();
    case StandbyState::Take::kWhole:
      return TakeFull(*c, u);
    case StandbyState::Take::kApply:
      break;
  }
  const int64_t n = c->layout.weights;
  if (!grad.empty() && static_cast<int64_t>(grad.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat("replicate: chunk ", u.chunk(), " has ", n,
                                                   " values; the update has ", grad.size()));
  }
  ASSIGN_OR_RETURN(const Slab slab, Pin(*c));
  // The very step the primary took.
  if (!grad.empty()) {
    Apply(*c, slab, u.clock(), grad.data(), u.has_hyper() ? &u.hyper() : nullptr,
          /*split=*/false);
  }
  c->clocks.SetApplied({u.applied().begin(), u.applied().end()});
  c->standby.version = u.version();
  MaybeCheckpoint(*c, slab);
  return absl::OkStatus();
}

void ChunkStore::JoinAsStandby(int64_t generation) {
  generation_ = generation;
  standby_.JoinAsStandby(generation);
}

}  // namespace pstrain
