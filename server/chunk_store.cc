#include "server/chunk_store.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/dtype.h"
#include "common/job_optimizer.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/simd.h"
#include "common/stage_plan.h"
#include "common/status_macros.h"
#include "server/round_sums.h"

namespace pstrain {
namespace {

// A push's parts go on the pool only when they hold this many values
// (about a millisecond of sums and steps on one core): below it the
// pool's wake-ups, and the cores it takes from a worker computing beside
// the server (ps_worker's MLP on 2 cores: 0.90 -> 0.70 of alone), cost
// more than they save. Each task takes at least kPartsGrain parts.
constexpr int64_t kParallelPushValues = 1 << 18;
constexpr int64_t kPartsGrain = 4;

}  // namespace

ServerMemoryNeeds ChunkStore::MemoryNeeds(const JobSpec& job, const Partition& partition,
                                          int server_id, const Optimizer& optimizer) {
  const std::vector<ParamInfo> params = ModelParams(job.model());
  return MemoryNeedsOf(PlanChunks(job, params, partition, server_id, optimizer));
}

ChunkStore::ChunkStore(const JobSpec& job, const Partition& partition, int server_id,
                       std::unique_ptr<Optimizer> optimizer, ThreadPool* pool, TraceWriter* trace,
                       const OffloadOptions& offload, StartValues start)
    : job_(job),
      server_id_(server_id),
      params_(ModelParams(job.model())),
      num_workers_(job.num_workers()),
      bsp_(job.consistency() == BSP),
      optimizer_(std::move(optimizer)),
      rules_(job.optimizer(), TotalClocks(job), optimizer_),
      pool_(pool),
      trace_(trace),
      chunk_ids_(HeldChunks(partition, server_id, job.standby_copies())),
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
    if (start == StartValues::kSeed) {
      if (memory_error_ = Initialize(c); !memory_error_.ok()) return;
    }
    // A standby copy is filled by its primary (it may be a replacement's).
    c.standby.Reset(Home(c), c.clocks.applied());
    standby_.Add(c.home, &c);
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
  if (c.given) {
    return absl::FailedPreconditionError(absl::StrCat(
        "chunk ", c.id, " moved to this server's shard of the next placement (generation ",
        c.generation, " ended)"));
  }
  // Then the next chunks are read while this one is used (asked for after
  // the pin: asked before, the guesses would move past this chunk while it
  // is still being read, and its room could go to the next one).
  absl::StatusOr<ChunkMemory::Slab> slab = memory_->Pin(c.id);
  if (slab.ok() && c.next >= 0) memory_->Prefetch(c.next);
  return slab;
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
  if (push.hyper != nullptr) RETURN_IF_ERROR(WithHyper(job_.optimizer(), *push.hyper).status());
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
    if (!c->standby.serving) {
      return absl::UnavailableError(absl::StrCat("server ", server_id_,
                                                 " keeps a standby copy of chunk ", part.chunk,
                                                 "; another serves it"));
    }
    if (!c->clocks.live(push.worker)) {
      return absl::FailedPreconditionError(
          absl::StrCat("worker ", push.worker, " was declared dead; its pushes are refused"));
    }
    if (part.absent ? part.values != 0 : part.values != c->layout.weights) {
      return absl::InvalidArgumentError(absl::StrCat("push: chunk ", part.chunk, " has ",
                                                     c->layout.weights, " values; the push has ",
                                                     part.bytes, " bytes of ", push.wire_dtype));
    }
    bool duplicate = false;
    RETURN_IF_ERROR(c->clocks.Classify(push.worker, push.clock, part.chunk, push.apply_at_once,
                                       &duplicate, job_.standby_copies() > 0));
  }
  return absl::OkStatus();
}

absl::Status ChunkStore::Push(const PushRequest& push,
                              const std::function<absl::Span<const float>(size_t)>& grad) {
  if (push.initial_values) {
    const absl::Status st = TakeInitialValues(push, grad);
    FlushShipped();
    return st;
  }
  RETURN_IF_ERROR(CheckPush(push));
  const absl::Status st = ApplyParts(push, grad);
  // The changes go to the standbys together: a request's, or under BSP a
  // clock's (once every round served here has closed).
  if (!bsp_ || push.apply_at_once || RoundsEven()) FlushShipped();
  return st;
}

absl::Status ChunkStore::ApplyParts(
    const PushRequest& push, const std::function<absl::Span<const float>(size_t)>& grad) {
  auto apply = [&](size_t i) {
    const PushRequest::Part& part = push.parts[i];
    return ApplyPart(push, part, part.absent ? absl::Span<const float>() : grad(i));
  };
  const auto n = static_cast<int64_t>(push.parts.size());
  int64_t values = 0;
  for (const PushRequest::Part& part : push.parts) values += part.values;
  // (An offloaded store's chunks are read from disk in the order asked.)
  if (!push.parts_in_parallel || pool_ == nullptr || pool_->parallelism() < 2 ||
      n <= kPartsGrain || values < kParallelPushValues || offloaded()) {
    absl::Status st;
    for (size_t i = 0; i < push.parts.size() && st.ok(); ++i) st = apply(i);
    return st;
  }
  std::vector<absl::Status> done(push.parts.size());
  pool_->ParallelFor(n, kPartsGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) done[i] = apply(static_cast<size_t>(i));
  });
  for (const absl::Status& st : done) {
    if (!st.ok()) return st;
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

absl::Status ChunkStore::ApplyPart(const PushRequest& push, const PushRequest::Part& part,
                                   absl::Span<const float> grad) {
  const int32_t chunk = part.chunk;
  const int worker = push.worker, num_samples = push.num_samples;
  const int64_t clock = push.clock;
  const float push_norm = push.grad_norm;
  Chunk& c = *Find(chunk);
  absl::MutexLock lock(&c.mu);
  // Restored since CheckPush: refused.
  if (const absl::Status st = CheckChunkGeneration(c, push.generation); !st.ok()) return st;
  bool duplicate = false;
  const absl::Status order = c.clocks.Classify(worker, clock, chunk, push.apply_at_once, &duplicate,
                                               job_.standby_copies() > 0);
  if (!order.ok()) return order;           // raced with another push of the same worker
  if (duplicate) return absl::OkStatus();  // a retried push, already taken
  if (!c.standby.serving) return absl::UnavailableError("chunk demoted to a standby copy");
  ASSIGN_OR_RETURN(const Slab slab, Pin(c));
  const int64_t n = c.layout.weights;
  const bool acceptable = !part.absent && nonfinite_.Admits(grad, worker, clock, [&] {
    return absl::StrCat("chunk ", chunk, " (", c.name, ")");
  }) && TakesValues(c, worker);
  if (acceptable) slab.MarkWritten();
  if (!bsp_ || push.apply_at_once) {  // SSP and ASP (also in a BSP job that switched)
    const float* applied = nullptr;   // what the optimizer took
    if (acceptable) {
      const float clip = job_.optimizer().clip_norm();
      applied = grad.data();
      if (clip > 0 && push_norm > clip) {
        // A scaled copy, in per-thread scratch that grows once to the largest chunk.
        thread_local std::vector<float> scaled;
        scaled.resize(n);
        Scale(grad.data(), n, clip / push_norm, scaled.data());
        applied = scaled.data();
      }
      Apply(c, slab, clock, applied, push.hyper.get());
    }
    c.clocks.Applied(worker, clock);
    Ship(c, clock, applied, push.hyper.get());
    TraceApply(worker, clock, chunk);
    MaybeCheckpoint(c, slab);
    return absl::OkStatus();
  }
  // BSP: the gate keeps every worker within one round, so `clock` is the
  // round being collected.
  c.clocks.Pushed(worker);
  c.round_hyper = push.hyper;
  const bool closes = c.clocks.RoundComplete();
  if (acceptable) {
    const int64_t samples = c.round_samples + num_samples;
    Accumulate(grad.data(), n, static_cast<float>(num_samples), c.round_samples == 0, closes,
               1.0f / static_cast<float>(samples + c.round_absent_samples), slab.grad());
    c.round_samples = samples;
  } else if (part.absent) {
    c.round_absent_samples += num_samples;
  }
  if (closes) CloseRound(c, slab, /*averaged=*/acceptable);
  return absl::OkStatus();
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

bool ChunkStore::TakesValues(const Chunk& c, int worker) {
  if (c.param->buffer != BROADCAST) return true;
  for (int w = 0; w < static_cast<int>(c.pushers.size()); ++w) {
    if (c.pushers[w] && c.clocks.live(w)) return w == worker;
  }
  return false;
}

void ChunkStore::Apply(Chunk& c, const Slab& slab, int64_t clock, const float* grad,
                       const OptimizerSpec* hyper, bool split) {
  if (c.param->buffer != NOT_A_BUFFER) {  // its values, not a gradient
    std::copy(grad, grad + c.layout.weights, slab.weights());
    slab.MarkWritten();
    return;
  }
  const UpdateRules::Rule rule = rules_.For(clock, hyper);
  UpdateContext ctx;
  ctx.step = ++c.steps;
  ctx.lr = rule.lr;
  const absl::Time begun = absl::Now();
  rule.optimizer->Update(ctx, c.shape, slab.weights(), slab.state(), grad, split ? pool_ : nullptr);
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
  return c->has_values && c->clocks.MinApplied() >= min_clock;
}

std::string ChunkStore::Lagging(int32_t chunk, int64_t min_clock) const {
  Chunk* c = Find(chunk);
  if (c == nullptr) return "";
  absl::MutexLock lock(&c->mu);
  if (!c->has_values) return "the model's initial values (pushed by worker 0)";
  return c->clocks.Lagging(min_clock, bsp_);
}

absl::Status ChunkStore::Read(int worker, int64_t clock, int64_t min_clock, int32_t chunk,
                              DType dtype, char* out, PulledClocks* clocks) const {
  Chunk* c = Find(chunk);
  absl::MutexLock lock(&c->mu);
  ASSIGN_OR_RETURN(const Slab slab, Pin(*c));
  EncodeFloats(dtype, slab.weights(), c->layout.weights, out);
  clocks->applied = c->clocks.applied();
  if (worker >= 0 && worker < c->clocks.num_workers()) {
    clocks->own_applied_most = c->clocks.applied()[worker];
    clocks->own_held_least = clocks->own_applied_most + (bsp_ && c->clocks.pushed(worker) ? 1 : 0);
  }
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

bool ChunkStore::RoundsEven() const {
  int64_t clock = -1;
  for (int32_t id : chunk_ids_) {
    const Chunk& c = *Find(id);
    absl::MutexLock lock(&c.mu);
    if (!c.standby.serving || !c.standby.shipped) continue;
    const int64_t at = c.clocks.MinApplied();
    if (clock >= 0 && at != clock) return false;
    clock = at;
  }
  return true;
}

int64_t ChunkStore::MinAppliedClock() const {
  // Over the chunks served here (standby copies follow them), else all.
  int64_t served = INT64_MAX, all = INT64_MAX;
  for (const auto& [id, c] : chunks_) {
    absl::MutexLock lock(&c->mu);
    all = std::min(all, c->clocks.MinApplied());
    if (c->standby.serving) served = std::min(served, c->clocks.MinApplied());
  }
  if (chunks_.empty()) return 0;
  return served != INT64_MAX ? served : all;
}

}  // namespace pstrain
