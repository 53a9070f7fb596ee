// ChunkStore's state as a whole: each chunk's initial values -- from the
// job's seed, or an EXTERNAL model's worker's (InitialValues) -- a
// restore from a checkpoint file, and the checkpoints it writes. See
// server/chunk_store.h.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/logging.h"
#include "common/params.h"
#include "common/status_macros.h"
#include "server/chunk_store.h"

namespace pstrain {

absl::Status ChunkStore::Initialize(Chunk& c) {
  ASSIGN_OR_RETURN(const Slab slab, Pin(c));
  const int64_t n = c.shape.numel();
  float* w = slab.weights();
  for (int64_t i = 0; i < n; ++i) w[i] = InitialValue(job_.seed(), *c.param, c.offset + i);
  std::fill(slab.state(), slab.state() + c.layout.state, 0.0f);
  std::fill(slab.grad(), slab.grad() + c.layout.grad, 0.0f);
  slab.MarkWritten();
  c.steps = 0;
  // An EXTERNAL model's weights come from a worker (TakeInitialValues).
  c.has_values = job_.model().kind() != EXTERNAL;
  return absl::OkStatus();
}

absl::Status ChunkStore::Restore(int64_t generation, int64_t clock, const CheckpointSet* set) {
  if (set != nullptr) RETURN_IF_ERROR(CheckRestorable(*set, clock));
  generation_ = generation;
  restore_clock_ = clock;
  for (int32_t id : chunk_ids_) {
    Chunk& c = *Find(id);
    absl::MutexLock lock(&c.mu);
    if (set == nullptr || !Home(c)) {
      RETURN_IF_ERROR(Initialize(c));
    } else {
      ASSIGN_OR_RETURN(const CheckpointFile* file, set->Holding(c.name));
      ASSIGN_OR_RETURN(const Slab slab, Pin(c));
      absl::Status st = file->Read(c.name, slab.weights(), c.layout.weights);
      if (st.ok() && c.layout.state > 0) {
        st = file->Read(c.name + "/state", slab.state(), c.layout.state);
      }
      absl::StatusOr<int64_t> steps = file->Steps(c.name);
      if (st.ok() && !steps.ok()) st = steps.status();
      if (!st.ok()) return st;
      std::fill(slab.grad(), slab.grad() + c.layout.grad, 0.0f);
      slab.MarkWritten();
      c.steps = *steps;
      c.has_values = true;
    }
    StartGeneration(c, generation, clock);
  }
  RestoreDone(clock);
  return absl::OkStatus();
}

absl::Status ChunkStore::Adopt(int64_t generation, int64_t clock,
                               std::map<int32_t, ChunkUpdate>* handed, ChunkStore* before) {
  generation_ = generation;
  restore_clock_ = clock;
  for (int32_t id : chunk_ids_) {
    Chunk& c = *Find(id);
    absl::MutexLock lock(&c.mu);
    if (auto it = handed->find(id); it != handed->end()) {
      ASSIGN_OR_RETURN(const Slab slab, Pin(c));
      RETURN_IF_ERROR(PutWhole(c, slab, it->second));
      handed->erase(it);
    } else if (before != nullptr) {
      RETURN_IF_ERROR(TakeWhole(c, *before));
    } else {
      return absl::InternalError(absl::StrCat("chunk ", id, " was not handed over"));
    }
    // (The round's sum is written by its first push: the gradient is left.)
    StartGeneration(c, generation, clock);
  }
  RestoreDone(clock);
  return absl::OkStatus();
}

absl::Status ChunkStore::TakeWhole(Chunk& c, ChunkStore& before) {
  Chunk* from = before.Find(c.id);
  if (from == nullptr || from->layout.weights != c.layout.weights ||
      from->layout.state != c.layout.state) {
    return absl::InternalError(
        absl::StrCat("chunk ", c.id, " is not held by the shard placed before as it is here"));
  }
  absl::MutexLock lock(&from->mu);
  if (from->given) return absl::InternalError(absl::StrCat("chunk ", c.id, " was taken already"));
  const SlabLayout &mine = c.layout, &theirs = from->layout;
  const bool same = mine.grad == theirs.grad && mine.gap == theirs.gap;
  if (!(same && memory_->Swap(c.id, *before.memory_))) {
    ASSIGN_OR_RETURN(const Slab source, before.Pin(*from));
    ASSIGN_OR_RETURN(const Slab slab, Pin(c));
    std::memcpy(slab.weights(), source.weights(), c.layout.weights * sizeof(float));
    std::memcpy(slab.state(), source.state(), c.layout.state * sizeof(float));
    slab.MarkWritten();
  }
  from->given = true;
  c.steps = from->steps;
  c.has_values = from->has_values;
  return absl::OkStatus();
}

void ChunkStore::StartGeneration(Chunk& c, int64_t generation, int64_t clock) {
  c.clocks.Restore(clock);
  c.ClearRound();
  c.checkpointed = clock;
  c.generation = generation;
  // A rollback serves every chunk from its own server again; the standby
  // copies wait for their primary's whole state.
  c.standby.Reset(Home(c), c.clocks.applied());
}

void ChunkStore::RestoreDone(int64_t clock) {
  {
    absl::MutexLock lock(&listener_mu_);
    if (listener_ != nullptr) listener_->RoundsDropped();
  }
  // Every chunk is of the new generation: no write of the old one can start now.
  if (checkpoint_ != nullptr) checkpoint_->Rollback(clock);
}

absl::Status ChunkStore::CheckRestorable(const CheckpointSet& set, int64_t clock) const {
  if (set.clock() != clock) {
    return absl::InvalidArgumentError(
        absl::StrCat("the checkpoint is of clock ", set.clock(), ", not of clock ", clock));
  }
  const std::string want = OptimizerType_Name(job_.optimizer().type());
  for (int32_t id : chunk_ids_) {
    const Chunk& c = *Find(id);
    if (!Home(c)) continue;
    absl::StatusOr<const CheckpointFile*> file = set.Holding(c.name);
    if (!file.ok()) return absl::InvalidArgumentError(file.status().message());
    if ((*file)->optimizer() != want) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint ", (*file)->path(), " holds ",
                                                     (*file)->optimizer(), " state; the job uses ",
                                                     want));
    }
  }
  return absl::OkStatus();
}

absl::Status ChunkStore::TakeInitialValues(
    const PushRequest& push, const std::function<absl::Span<const float>(size_t)>& values) {
  if (job_.model().kind() != EXTERNAL) {
    return absl::InvalidArgumentError(
        "initial values are for an EXTERNAL model; this job's initialises its own");
  }
  if (push.parts.empty()) return absl::InvalidArgumentError("initial values: no chunks");
  RETURN_IF_ERROR(CheckGeneration(push.generation));
  if (push.wire_dtype != DTypeName(FP32)) {
    return absl::InvalidArgumentError(
        absl::StrCat("initial values must be fp32, not ", push.wire_dtype));
  }
  if (push.worker < 0 || push.worker >= num_workers_) {
    return absl::InvalidArgumentError(absl::StrCat("unknown worker ", push.worker));
  }
  for (const PushRequest::Part& part : push.parts) {
    const Chunk* c = Find(part.chunk);
    if (c == nullptr || part.values != c->layout.weights) {
      return absl::InvalidArgumentError(
          absl::StrCat("initial values: chunk ", part.chunk,
                       c == nullptr ? " is not this server's" : " has another size"));
    }
  }
  for (size_t i = 0; i < push.parts.size(); ++i) {
    Chunk& c = *Find(push.parts[i].chunk);
    absl::MutexLock lock(&c.mu);
    RETURN_IF_ERROR(CheckChunkGeneration(c, push.generation));
    if (c.has_values) continue;  // the first wins; a retry or another worker's is ignored
    ASSIGN_OR_RETURN(const Slab slab, Pin(c));
    const absl::Span<const float> v = values(i);
    std::copy(v.begin(), v.end(), slab.weights());
    slab.MarkWritten();
    c.has_values = true;
    Ship(c, 0, nullptr, nullptr, /*full=*/true);
  }
  return absl::OkStatus();
}

absl::StatusOr<int> ChunkStore::StateArrays(const Chunk& c) const {
  const auto* elementwise = dynamic_cast<const ElementwiseOptimizer*>(optimizer_.get());
  if (elementwise == nullptr) {
    return absl::UnimplementedError("this job's optimizer keeps no elementwise state");
  }
  return c.layout.state == 0 ? 0 : elementwise->arrays();  // (a buffer's: none)
}

absl::Status ChunkStore::ReadState(int32_t chunk, ChunkState* out) const {
  Chunk* c = Find(chunk);
  ASSIGN_OR_RETURN(const int arrays, StateArrays(*c));
  absl::MutexLock lock(&c->mu);
  ASSIGN_OR_RETURN(const Slab slab, Pin(*c));
  const int64_t n = c->layout.weights;
  out->Clear();
  out->set_chunk(chunk);
  out->set_steps(c->steps);
  out->set_arrays(arrays);
  for (int k = 0; k < arrays; ++k) {
    const float* array = slab.state() + k * (n + kArrayGap);
    out->mutable_state()->Add(array, array + n);
  }
  return absl::OkStatus();
}

absl::Status ChunkStore::WriteState(const ChunkState& state) {
  Chunk& c = *Find(state.chunk());
  ASSIGN_OR_RETURN(const int arrays, StateArrays(c));
  absl::MutexLock lock(&c.mu);
  if (c.has_values) return absl::OkStatus();  // started already: the first wins
  const int64_t n = c.layout.weights;
  if (state.arrays() != arrays || state.state_size() != arrays * n || state.steps() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("write state: chunk ", state.chunk(), " (", c.name, ") keeps ", arrays,
                     " arrays of ", n, "; the request has ", state.state_size(), " values in ",
                     state.arrays(), " and steps ", state.steps()));
  }
  ASSIGN_OR_RETURN(const Slab slab, Pin(c));
  for (int k = 0; k < arrays; ++k) {
    std::copy_n(state.state().data() + k * n, n, slab.state() + k * (n + kArrayGap));
  }
  slab.MarkWritten();
  c.steps = state.steps();
  Ship(c, 0, nullptr, nullptr, /*full=*/true);
  FlushShipped();
  return absl::OkStatus();
}

void ChunkStore::SetCheckpointing(CheckpointWriter* writer, const CheckpointSchedule* schedule) {
  checkpoint_ = writer;
  checkpoint_schedule_ = schedule;
}

std::vector<CheckpointWriter::Chunk> ChunkStore::CheckpointLayout() const {
  std::vector<CheckpointWriter::Chunk> out;
  for (int32_t id : chunk_ids_) {
    const Chunk& c = *Find(id);
    if (!Home(c)) continue;  // a standby copy: its own server's checkpoint holds it
    absl::MutexLock lock(&c.mu);
    out.push_back({id, c.name, c.layout.weights, c.layout.state});
  }
  return out;
}

void ChunkStore::MaybeCheckpoint(Chunk& c, const Slab& slab) {
  if (checkpoint_ == nullptr || !Home(c)) return;
  const int64_t clock = c.clocks.MinApplied();
  if (!checkpoint_schedule_->Due(clock, c.checkpointed)) return;
  c.checkpointed = clock;
  const absl::Status st = checkpoint_->Write(clock, c.id, slab.weights(), slab.state(), c.steps);
  if (!st.ok()) checkpoint_schedule_->Failed(c.name, clock, st);
}

}  // namespace pstrain
