#include "server/chunk_store.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/dtype.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/simd.h"
#include "common/stage_plan.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

// The sum of x[i]² in double, in kLanes partial sums (which vectorise), the
// same bits in either clone: a float's square is exact in double, so
// contracting to an FMA changes nothing.
PSTRAIN_SIMD_CLONES
double SumSquares(const float* x, int64_t n) {
  constexpr int kLanes = 8;
  double lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) lanes[k] += static_cast<double>(x[i + k]) * x[i + k];
  }
  double sum = 0;
  for (; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  for (double lane : lanes) sum += lane;
  return sum;
}

// out = a * x (out may be x)
PSTRAIN_SIMD_CLONES
void Scale(const float* x, int64_t n, float a, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = a * x[i];
}

// A BSP round's sum, one push at a time, in one pass over y: y = base +
// a * x with base 0 for the round's first push (y holds the last round's
// mean then) and y after, and for the push that closes the round times
// `mean` (1 / the round's samples). The same float operations in the same
// order as zeroing y (a pass of its own), y += a * x and y *= mean (another)
// would do, so the result is the same to the bit, contracted to an FMA or
// not (the base is a +0.0f, as the zeroed y was).
PSTRAIN_SIMD_CLONES
void Accumulate(const float* __restrict x, int64_t n, float a, bool first, bool close, float mean,
                float* __restrict y) {
  if (first && close) {
    for (int64_t i = 0; i < n; ++i) y[i] = mean * (0.0f + a * x[i]);
  } else if (first) {
    for (int64_t i = 0; i < n; ++i) y[i] = 0.0f + a * x[i];
  } else if (close) {
    for (int64_t i = 0; i < n; ++i) y[i] = mean * (y[i] + a * x[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
  }
}

}  // namespace

ServerMemoryNeeds ChunkStore::MemoryNeeds(const JobSpec& job, const Partition& partition,
                                          int server_id, const Optimizer& optimizer) {
  const std::vector<ParamInfo> params = ModelParams(job.model());
  return MemoryNeedsOf(PlanChunks(job, params, partition, server_id, optimizer));
}

ChunkStore::ChunkStore(const JobSpec& job, const Partition& partition, int server_id,
                       std::unique_ptr<Optimizer> optimizer, ThreadPool* pool, TraceWriter* trace,
                       const OffloadOptions& offload)
    : job_(job),
      server_id_(server_id),
      params_(ModelParams(job.model())),
      num_workers_(job.num_workers()),
      bsp_(job.consistency() == BSP),
      optimizer_(std::move(optimizer)),
      schedule_(job.optimizer(), TotalClocks(job)),
      pool_(pool),
      trace_(trace),
      chunk_ids_(partition.ServerChunks(server_id)),
      hold_rounds_(bsp_ && job.optimizer().clip_norm() > 0),
      nonfinite_(job.optimizer().allow_nonfinite()) {
  std::vector<SlabLayout> slabs;
  for (ChunkPlan& plan : PlanChunks(job, params_, partition, server_id, *optimizer_)) {
    auto c = std::make_unique<Chunk>(std::move(plan));
    slabs.push_back(c->layout);
    num_params_ += c->layout.weights;
    largest_chunk_ = std::max(largest_chunk_, c->layout.weights);
    bytes_held_ += (c->layout.weights + c->layout.state + c->layout.grad) *
                   static_cast<int64_t>(sizeof(float));
    const int32_t id = c->id;
    chunks_.emplace(id, std::move(c));
  }
  absl::StatusOr<std::unique_ptr<ChunkMemory>> memory = ChunkMemory::Make(slabs, offload);
  if (!memory.ok()) {
    memory_error_ = memory.status();
    return;
  }
  memory_ = std::move(*memory);
  for (int32_t id : chunk_ids_) {
    Chunk& c = *Find(id);
    absl::MutexLock lock(&c.mu);
    if (memory_error_ = Initialize(c); !memory_error_.ok()) return;
  }
}

absl::Status ChunkStore::health() const {
  return memory_ == nullptr ? memory_error_ : memory_->health();
}

ChunkMemoryStats ChunkStore::memory_stats() const {
  return memory_ == nullptr ? ChunkMemoryStats{} : memory_->stats();
}

absl::StatusOr<ChunkStore::Slab> ChunkStore::Pin(const Chunk& c) const {
  if (memory_ == nullptr) return memory_error_;
  // The next chunk is asked for first: it is read while this one is used.
  if (c.next >= 0) memory_->Prefetch(c.next);
  return memory_->Pin(c.id);
}

absl::Status ChunkStore::Initialize(Chunk& c) {
  ASSIGN_OR_RETURN(const Slab slab, Pin(c));
  const int64_t n = c.shape.numel();
  float* w = slab.weights();
  for (int64_t i = 0; i < n; ++i) w[i] = InitialValue(job_.seed(), *c.param, c.offset + i);
  std::fill(slab.state(), slab.state() + c.layout.state, 0.0f);
  std::fill(slab.grad(), slab.grad() + c.layout.grad, 0.0f);
  slab.MarkWritten();
  c.steps = 0;
  // An EXTERNAL model's weights come from a worker (Seed).
  c.seeded = job_.model().kind() != EXTERNAL;
  return absl::OkStatus();
}

absl::Status ChunkStore::CheckGeneration(int64_t generation) const {
  const int64_t mine = generation_;
  if (generation == mine) return absl::OkStatus();
  if (generation < mine) {
    return absl::FailedPreconditionError(
        absl::StrCat("the cluster rolled back to clock ", restore_clock_.load(), " (generation ",
                     mine, "); this request is of generation ", generation));
  }
  return absl::UnavailableError(absl::StrCat("this server has not restored generation ", generation,
                                             " yet (it holds ", mine, ")"));
}

absl::Status ChunkStore::CheckChunkGeneration(const Chunk& c, int64_t generation) const {
  if (generation == c.generation) return absl::OkStatus();
  const absl::Status store = CheckGeneration(generation);
  return store.ok() ? absl::UnavailableError("chunk being restored") : store;
}

absl::Status ChunkStore::Restore(int64_t generation, int64_t clock, const CheckpointFile* file) {
  if (file != nullptr) {
    if (file->clock() != clock || file->server() != server_id_) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint ", file->path(), " is of server ", file->server(), " at clock ",
                       file->clock(), ", not of server ", server_id_, " at clock ", clock));
    }
    const std::string want = OptimizerType_Name(job_.optimizer().type());
    if (file->optimizer() != want) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint ", file->path(), " holds ",
                                                     file->optimizer(), " state; the job uses ",
                                                     want));
    }
  }
  generation_ = generation;
  restore_clock_ = clock;
  for (int32_t id : chunk_ids_) {
    Chunk& c = *Find(id);
    absl::MutexLock lock(&c.mu);
    if (file == nullptr) {
      RETURN_IF_ERROR(Initialize(c));
    } else {
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
      c.seeded = true;
    }
    c.clocks.Restore(clock);
    c.round_samples = 0;
    c.round_closed = false;
    c.checkpointed = clock;
    c.generation = generation;
  }
  {
    absl::MutexLock lock(&listener_mu_);
    if (listener_ != nullptr) listener_->RoundsDropped();
  }
  // Every chunk is of the new generation: no write of the old one can start now.
  if (checkpoint_ != nullptr) checkpoint_->Rollback(clock);
  return absl::OkStatus();
}

int64_t ChunkStore::checkpoint_clock() const {
  return checkpoint_ == nullptr ? 0 : checkpoint_->latest();
}

ChunkStore::Chunk* ChunkStore::Find(int32_t chunk) const {
  auto it = chunks_.find(chunk);
  return it == chunks_.end() ? nullptr : it->second.get();
}

absl::Status ChunkStore::CheckChunk(int32_t chunk) const {
  if (Find(chunk) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("unknown chunk ", chunk, " for this server"));
  }
  return absl::OkStatus();
}

absl::Status ChunkStore::CheckPush(const PushRequest& push) const {
  RETURN_IF_ERROR(CheckGeneration(push.generation));
  if (push.parts.empty()) return absl::InvalidArgumentError("push: no chunks");
  if (!(push.grad_norm >= 0) || std::isinf(push.grad_norm)) {
    return absl::InvalidArgumentError(
        absl::StrCat("push: grad_norm ", push.grad_norm, " is not a finite norm"));
  }
  if (push.worker < 0 || push.worker >= num_workers_) {
    return absl::InvalidArgumentError(absl::StrCat("unknown worker ", push.worker));
  }
  if (push.num_samples < 1 || push.num_samples > job_.batch_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_samples ", push.num_samples, " outside [1, ", job_.batch_size(), "]"));
  }
  for (const PushRequest::Part& part : push.parts) {
    Chunk* c = Find(part.chunk);
    if (c == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown chunk ", part.chunk, " for this server"));
    }
    if (!c->pushers[push.worker]) {
      return absl::InvalidArgumentError(
          absl::StrCat("worker ", push.worker, " trains pipeline stage ",
                       StageOf(push.worker, std::max(1, job_.pipeline_stages())), "; chunk ",
                       part.chunk, " (", c->name, ") belongs to stage ", c->stage));
    }
    absl::MutexLock lock(&c->mu);
    RETURN_IF_ERROR(CheckChunkGeneration(*c, push.generation));
    if (!c->clocks.live(push.worker)) {
      return absl::FailedPreconditionError(
          absl::StrCat("worker ", push.worker, " was declared dead; its pushes are refused"));
    }
    if (part.values != c->layout.weights) {
      return absl::InvalidArgumentError(absl::StrCat("push: chunk ", part.chunk, " has ",
                                                     c->layout.weights, " values; the push has ",
                                                     part.bytes, " bytes of ", push.wire_dtype));
    }
    bool duplicate = false;
    RETURN_IF_ERROR(
        c->clocks.Classify(push.worker, push.clock, part.chunk, push.apply_at_once, &duplicate));
  }
  return absl::OkStatus();
}

absl::Status ChunkStore::Seed(const PushRequest& push,
                              const std::function<absl::Span<const float>(size_t)>& values) {
  if (job_.model().kind() != EXTERNAL) {
    return absl::InvalidArgumentError(
        "a seed of initial weights is for an EXTERNAL model; this job's initialises its own");
  }
  if (push.parts.empty()) return absl::InvalidArgumentError("seed: no chunks");
  RETURN_IF_ERROR(CheckGeneration(push.generation));
  if (push.wire_dtype != DTypeName(FP32)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a seed of initial weights must be fp32, not ", push.wire_dtype));
  }
  if (push.worker < 0 || push.worker >= num_workers_) {
    return absl::InvalidArgumentError(absl::StrCat("unknown worker ", push.worker));
  }
  for (const PushRequest::Part& part : push.parts) {
    const Chunk* c = Find(part.chunk);
    if (c == nullptr || part.values != c->layout.weights) {
      return absl::InvalidArgumentError(absl::StrCat(
          "seed: chunk ", part.chunk, c == nullptr ? " is not this server's" : " has another size"));
    }
  }
  for (size_t i = 0; i < push.parts.size(); ++i) {
    Chunk& c = *Find(push.parts[i].chunk);
    absl::MutexLock lock(&c.mu);
    RETURN_IF_ERROR(CheckChunkGeneration(c, push.generation));
    if (c.seeded) continue;  // the first seed wins; a retry or a later seeder is ignored
    ASSIGN_OR_RETURN(const Slab slab, Pin(c));
    const absl::Span<const float> v = values(i);
    std::copy(v.begin(), v.end(), slab.weights());
    slab.MarkWritten();
    c.seeded = true;
  }
  return absl::OkStatus();
}

absl::Status ChunkStore::Push(const PushRequest& push,
                              const std::function<absl::Span<const float>(size_t)>& grad) {
  if (push.seed) return Seed(push, grad);
  RETURN_IF_ERROR(CheckPush(push));
  for (size_t i = 0; i < push.parts.size(); ++i) {
    RETURN_IF_ERROR(ApplyPart(push, push.parts[i].chunk, grad(i)));
  }
  return absl::OkStatus();
}

absl::Status ChunkStore::Push(int worker, int64_t clock, int num_samples, int32_t chunk,
                              absl::Span<const float> grad, float push_norm, int64_t generation) {
  PushRequest push;
  push.worker = worker;
  push.clock = clock;
  push.num_samples = num_samples;
  push.grad_norm = push_norm;
  push.generation = generation;
  push.parts.push_back({chunk, static_cast<int64_t>(grad.size()),
                        static_cast<int64_t>(grad.size() * sizeof(float))});
  return Push(push, [grad](size_t) { return grad; });
}

int64_t ChunkStore::ChunkNumel(int32_t chunk) const {
  const Chunk* c = Find(chunk);
  return c == nullptr ? 0 : c->shape.numel();
}

absl::Status ChunkStore::ApplyPart(const PushRequest& push, int32_t chunk,
                                   absl::Span<const float> grad) {
  const int worker = push.worker, num_samples = push.num_samples;
  const int64_t clock = push.clock;
  const float push_norm = push.grad_norm;
  Chunk& c = *Find(chunk);
  absl::MutexLock lock(&c.mu);
  // Restored since CheckPush: refused.
  if (const absl::Status st = CheckChunkGeneration(c, push.generation); !st.ok()) return st;
  bool duplicate = false;
  const absl::Status order =
      c.clocks.Classify(worker, clock, chunk, push.apply_at_once, &duplicate);
  if (!order.ok()) return order;           // raced with another push of the same worker
  if (duplicate) return absl::OkStatus();  // a retried push, already taken
  ASSIGN_OR_RETURN(const Slab slab, Pin(c));
  const int64_t n = c.layout.weights;
  const bool acceptable = nonfinite_.Admits(grad, worker, clock, [&] {
    return absl::StrCat("chunk ", chunk, " (", c.name, ")");
  });
  if (acceptable) slab.MarkWritten();
  if (!bsp_ || push.apply_at_once) {  // SSP and ASP (also in a BSP job that switched)
    if (acceptable) {
      const float clip = job_.optimizer().clip_norm();
      if (clip > 0 && push_norm > clip) {
        // A scaled copy, in per-thread scratch that grows once to the largest chunk.
        thread_local std::vector<float> scaled;
        scaled.resize(n);
        Scale(grad.data(), n, clip / push_norm, scaled.data());
        Apply(c, slab, clock, scaled.data());
      } else {
        Apply(c, slab, clock, grad.data());
      }
    }
    c.clocks.Applied(worker, clock);
    TraceApply(worker, clock, chunk);
    MaybeCheckpoint(c, slab);
    return absl::OkStatus();
  }
  // BSP: the gate keeps every worker within one round, so `clock` is the
  // round being collected.
  c.clocks.Pushed(worker);
  const bool closes = c.clocks.RoundComplete();
  if (acceptable) {
    const int64_t samples = c.round_samples + num_samples;
    Accumulate(grad.data(), n, static_cast<float>(num_samples), c.round_samples == 0, closes,
               1.0f / static_cast<float>(samples), slab.grad());
    c.round_samples = samples;
  }
  if (closes) CloseRound(c, slab, /*averaged=*/acceptable);
  return absl::OkStatus();
}

void ChunkStore::CloseRound(Chunk& c, const Slab& slab, bool averaged) {
  const int64_t n = c.layout.grad;
  if (c.round_samples == 0) {
    // Every push skipped: nothing is applied, and a held round's norm reads
    // zeros (written: an offloaded slab may be read back before that).
    std::fill(slab.grad(), slab.grad() + n, 0.0f);
    slab.MarkWritten();
  } else if (!averaged) {
    Scale(slab.grad(), n, 1.0f / static_cast<float>(c.round_samples), slab.grad());
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
  if (worker < 0 || worker >= num_workers_) return;
  for (const auto& [id, c] : chunks_) {
    absl::MutexLock lock(&c->mu);
    if (!c->clocks.Remove(worker)) continue;
    if (!bsp_ || c->round_closed || !c->clocks.RoundComplete()) continue;
    absl::StatusOr<Slab> slab = Pin(*c);
    if (slab.ok()) CloseRound(*c, *slab, /*averaged=*/false);  // else the server fails (health())
  }
}

void ChunkStore::ApplyRound(Chunk& c, const Slab& slab, float scale) {
  const int64_t n = c.layout.grad;
  const int64_t clock = c.clocks.MinApplied();  // every live worker is in this round
  if (c.round_samples > 0) {            // else every push of the round was skipped
    if (scale != 1.0f) Scale(slab.grad(), n, scale, slab.grad());
    Apply(c, slab, clock, slab.grad());
  }
  // The sum is not zeroed: the next round's first push overwrites it (Accumulate).
  slab.MarkWritten();
  c.round_samples = 0;
  c.round_closed = false;
  c.clocks.NextRound();
  for (int w = 0; w < num_workers_; ++w) {
    if (c.clocks.live(w)) TraceApply(w, c.clocks.applied()[w] - 1, c.id);
  }
  MaybeCheckpoint(c, slab);
}

void ChunkStore::SetCheckpointing(CheckpointWriter* writer, const CheckpointSchedule* schedule) {
  checkpoint_ = writer;
  checkpoint_schedule_ = schedule;
}

std::vector<CheckpointWriter::Chunk> ChunkStore::CheckpointLayout() const {
  std::vector<CheckpointWriter::Chunk> out;
  for (int32_t id : chunk_ids_) {
    const Chunk& c = *Find(id);
    absl::MutexLock lock(&c.mu);
    out.push_back({id, c.name, c.layout.weights, c.layout.state});
  }
  return out;
}

void ChunkStore::MaybeCheckpoint(Chunk& c, const Slab& slab) {
  if (checkpoint_ == nullptr) return;
  const int64_t clock = c.clocks.MinApplied();
  if (!checkpoint_schedule_->Due(clock, c.checkpointed)) return;
  c.checkpointed = clock;
  const absl::Status st =
      checkpoint_->Write(clock, c.id, slab.weights(), slab.state(), c.steps);
  if (!st.ok() && !checkpoint_error_logged_.exchange(true)) {
    spdlog::error("checkpoint of clock {} failed (logged once): {}", clock, st.message());
  }
}

void ChunkStore::SetRoundListener(Listener* listener) {
  absl::MutexLock lock(&listener_mu_);
  listener_ = listener;
}

void ChunkStore::ForEachChunk(absl::FunctionRef<void(size_t, Chunk&)> fn) const {
  auto range = [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) fn(static_cast<size_t>(k), *Find(chunk_ids_[k]));
  };
  const auto n = static_cast<int64_t>(chunk_ids_.size());
  // A chunk large enough to be split by its own update keeps the pool for that.
  const bool split_inside = largest_chunk_ >= 2 * kMinUpdateGrain;
  if (pool_ == nullptr || memory_ == nullptr || memory_->offloaded() || split_inside) {
    range(0, n);
  } else {
    pool_->ParallelFor(n, 1, range);
  }
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
  for (const absl::Status& st : errors) RETURN_IF_ERROR(st);
  return absl::OkStatus();
}

void ChunkStore::Apply(Chunk& c, const Slab& slab, int64_t clock, const float* grad) {
  UpdateContext ctx;
  ctx.step = ++c.steps;
  ctx.lr = schedule_.At(clock);
  const absl::Time begun = absl::Now();
  optimizer_->Update(ctx, c.shape, slab.weights(), slab.state(), grad, pool_);
  ProcessLatencies().optimizer_update.Observe(absl::Now() - begun);
  slab.MarkWritten();
}

void ChunkStore::TraceApply(int worker, int64_t clock, int32_t chunk) const {
  if (trace_ == nullptr || !trace_->enabled()) return;
  TraceEvent e;
  e.set_event("apply");
  e.set_worker(worker);
  e.set_clock(clock);
  e.set_chunk(chunk);
  trace_->Write(e);
}

bool ChunkStore::Readable(int32_t chunk, int64_t min_clock) const {
  Chunk* c = Find(chunk);
  if (c == nullptr) return false;
  absl::MutexLock lock(&c->mu);
  return c->seeded && c->clocks.MinApplied() >= min_clock;
}

std::string ChunkStore::Lagging(int32_t chunk, int64_t min_clock) const {
  Chunk* c = Find(chunk);
  if (c == nullptr) return "";
  absl::MutexLock lock(&c->mu);
  if (!c->seeded) return "the model's initial weights (a seed from worker 0)";
  return c->clocks.Lagging(min_clock, bsp_);
}

absl::Status ChunkStore::Read(int worker, int64_t clock, int64_t min_clock, int32_t chunk,
                              DType dtype, char* out, std::vector<int64_t>* applied) const {
  Chunk* c = Find(chunk);
  absl::MutexLock lock(&c->mu);
  ASSIGN_OR_RETURN(const Slab slab, Pin(*c));
  EncodeFloats(dtype, slab.weights(), c->layout.weights, out);
  *applied = c->clocks.applied();
  if (trace_ != nullptr && trace_->enabled()) {
    TraceEvent e;
    e.set_event("pull");
    e.set_worker(worker);
    e.set_clock(clock);
    e.set_chunk(chunk);
    e.set_min_clock(min_clock);
    for (int64_t a : c->clocks.applied()) e.add_applied(a);
    trace_->Write(e);
  }
  return absl::OkStatus();
}

int64_t ChunkStore::MinAppliedClock() const {
  int64_t min_clock = INT64_MAX;
  for (const auto& [id, c] : chunks_) {
    absl::MutexLock lock(&c->mu);
    min_clock = std::min(min_clock, c->clocks.MinApplied());
  }
  return chunks_.empty() ? 0 : min_clock;
}

}  // namespace pstrain
