// The chunks one server owns: fp32 master weights, optimizer state, the BSP
// round being collected, and per worker how many of its iterations have been
// applied (the basis of the read guarantee; server/chunk_clocks.h). What
// each chunk is comes from server/chunk_plan.h. The arrays live in memory
// or, offloaded, in a file with a budget of them resident
// (server/chunk_memory.h). With standby copies (JobSpec.standby_copies) it
// also holds the standby copies of the previous server's chunks: each
// chunk is served here (its primary) or kept as a standby, as the
// scheduler's routes say (SetRoles); a served chunk's every change goes to
// the ChunkSink, and a push counts as replicated once the standby
// confirmed it (server/chunk_store_standby.cc). Under BSP with clipping by the global norm the
// store holds each closed round (server/held_rounds.h) for the cross-server
// protocol of server/global_clipping.h to release. Knows nothing of gRPC.
#ifndef PSTRAIN_SERVER_CHUNK_STORE_H_
#define PSTRAIN_SERVER_CHUNK_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/partition.h"
#include "common/pulled_clocks.h"
#include "common/thread_pool.h"
#include "common/trace.h"
#include "proto/job.pb.h"
#include "proto/ps.pb.h"
#include "server/checkpoint.h"
#include "server/checkpoint_schedule.h"
#include "server/checkpoint_set.h"
#include "server/chunk_clocks.h"
#include "server/chunk_memory.h"
#include "server/chunk_plan.h"
#include "server/held_rounds.h"
#include "server/memory_plan.h"
#include "server/nonfinite.h"
#include "server/optimizer.h"
#include "server/standby_part.h"
#include "server/standby_parts.h"
#include "server/update_rules.h"

namespace pstrain {

// Thread-safe: each chunk has its own lock, so pushes and pulls of different
// chunks run in parallel.
class ChunkStore : public HeldRounds {
 public:
  // Where a served chunk's changes go, in order per chunk, for its standby
  // (server/standby_sender.h). Called under the chunk's lock: quick.
  class ChunkSink {
   public:
    virtual ~ChunkSink() = default;
    // `update` of a chunk of home server `home`.
    virtual void Changed(int home, ChunkUpdate update) = 0;
    // The changes so far may go: the request that made them is done (so a
    // request's changes go together).
    virtual void Flush() {}
    // Chunk `chunk` of home server `home` changed otherwise than by an
    // optimizer step (initial values, a state written): its whole state
    // goes next.
    virtual void NeedWhole(int home, int32_t chunk) = 0;
  };

  // What a new store's chunks hold: the job seed's initial values, or
  // nothing yet -- a store made for a restore or a move's switch, which
  // writes every chunk before anything reads one (Restore, Adopt).
  enum class StartValues { kSeed, kNone };
  // Owns the chunks `partition` gives `server_id` and gives them `start`
  // values, in memory or offloaded as `offload` says (a failure to make
  // the offload file is health()'s; the store is then unusable). The
  // optimizer splits large updates over `pool`; `pool` and `trace` may be
  // null and must outlive the store.
  ChunkStore(const JobSpec& job, const Partition& partition, int server_id,
             std::unique_ptr<Optimizer> optimizer, ThreadPool* pool, TraceWriter* trace,
             const OffloadOptions& offload = {}, StartValues start = StartValues::kSeed);
  // What an offloaded store of `server_id`'s chunks needs of a budget (see
  // server/memory_plan.h).
  static ServerMemoryNeeds MemoryNeeds(const JobSpec& job, const Partition& partition,
                                       int server_id, const Optimizer& optimizer);
  // OK, or why the chunks' memory failed (its file could not be made, read
  // or written): the server cannot go on.
  absl::Status health() const;
  ChunkMemoryStats memory_stats() const;

  // One push request: iteration `clock`'s gradients (each the mean over
  // `num_samples` samples) of several chunks from `worker`; `grad_norm` is
  // the norm of the worker's whole gradient (clipping under SSP/ASP).
  struct PushRequest {
    int worker = 0;
    int64_t clock = 0;
    int num_samples = 0;
    float grad_norm = 0;
    int64_t generation = 0;
    bool apply_at_once = false;   // see PushRequest.apply_at_once
    bool initial_values = false;  // see PushRequest.initial_values: weights, not gradients
    // PushRequest.hyper (null: none); CheckPush checks it (WithHyper).
    std::shared_ptr<const OptimizerSpec> hyper;
    std::string wire_dtype = "fp32";  // how the values came, for messages
    struct Part {
      int32_t chunk = 0;
      int64_t values = 0;  // how many the request holds for it
      int64_t bytes = 0;   // in the wire dtype
      // PushRequest.without_gradient: the chunk's parameter took no
      // gradient this clock; no values (0), nothing applied.
      bool absent = false;
    };
    std::vector<Part> parts;
    // `grad` may be called from several threads at once (each for parts of
    // its own; values in shared memory): the parts are then applied on the
    // store's thread pool, as concurrent pushes of disjoint chunks are.
    bool parts_in_parallel = false;
  };
  // The one owner of a push's meaning. Validates the whole request first --
  // the generation (see CheckGeneration), the norm, every part against its
  // chunk's size, the worker (known, live), the number of samples and the
  // worker's next clock -- so it is taken whole or not at all; then applies
  // each part, whose values `grad(i)` gives (decoded by the caller only
  // then). BSP adds them to the chunk's round and applies one optimizer step
  // over the round's mean once every live worker has pushed; SSP and ASP
  // apply them at once, scaled by min(1, clip_norm / grad_norm) when the job
  // clips. A part without a gradient (Part::absent) is taken as a push of
  // the chunk with nothing to apply: SSP and ASP apply nothing; under BSP
  // its samples count in the round's mean but add nothing to its sum, and a
  // round with no gradient at all takes no optimizer step (as torch.optim
  // skips a parameter whose .grad is None). A push repeated for an
  // iteration already taken is acknowledged and ignored (client retries). A part with a NaN or Inf is taken but not
  // applied (unless the job allows them): counted, and logged once per
  // chunk. INVALID_ARGUMENT for an unknown chunk or worker, a size mismatch,
  // or a clock other than the worker's next; FAILED_PRECONDITION for a dead
  // worker's push. An initial-values push (an EXTERNAL model's initial
  // weights, fp32) is written to each chunk without values yet and ignored
  // by the others.
  absl::Status Push(const PushRequest& push,
                    const std::function<absl::Span<const float>(size_t part)>& grad);
  // One chunk's push (tests, benchmarks): a request of one part.
  absl::Status Push(int worker, int64_t clock, int num_samples, int32_t chunk,
                    absl::Span<const float> grad, float push_norm = 0, int64_t generation = 0);

  // Whether a request of cluster generation `generation` may be served: OK for the
  // store's generation; FAILED_PRECONDITION for an older one (the cluster rolled
  // back since: the worker must resume from the checkpoint); UNAVAILABLE
  // for a newer one (this server has not restored it yet: retry).
  absl::Status CheckGeneration(int64_t generation) const;
  // Rolls back to the start of generation `generation`: every chunk's weights,
  // optimizer state and step count from `set` (the servers' checkpoint of
  // `clock`, each chunk from the file that holds it, whichever server's;
  // null with clock 0: the initial weights), every live worker's applied
  // clock set to `clock`, BSP rounds emptied. Pushes of older generations are
  // refused from then on. INVALID_ARGUMENT, nothing changed, when the set is
  // of another clock, lacks one of this server's chunks or holds another
  // optimizer's state; when a chunk's tensors do not match it (the store
  // is then unusable).
  absl::Status Restore(int64_t generation, int64_t clock, const CheckpointSet* set);
  // A move's switch (server/move_intake.h): the state of generation
  // `generation` from clock `clock` as Restore's, but each chunk's weights,
  // optimizer state and step count from its whole state in `*handed` (a
  // handover to this server: taken out), else from `before` -- the store
  // that held it until now, this server's (null: none) -- not from a
  // file. A chunk taken from `before` is given, not copied, where both
  // stores are in memory (ChunkMemory::Swap), and answers no call there
  // from then on (FAILED_PRECONDITION: the old generation's calls end).
  // INTERNAL for a chunk in neither, INVALID_ARGUMENT naming the chunk for
  // a state of another size (the store is then unusable).
  absl::Status Adopt(int64_t generation, int64_t clock, std::map<int32_t, ChunkUpdate>* handed,
                     ChunkStore* before);
  int64_t generation() const { return generation_; }
  // The newest checkpoint clock written or restored in this generation (0: none).
  int64_t checkpoint_clock() const;

  // INVALID_ARGUMENT unless `chunk` is one of this server's.
  absl::Status CheckChunk(int32_t chunk) const;
  // True when every worker's updates of iterations < min_clock are applied
  // to `chunk` (the read guarantee), and the chunk holds weights: an
  // EXTERNAL model's chunk only once given its initial values or restored.
  bool Readable(int32_t chunk, int64_t min_clock) const;
  // The live workers whose updates of `chunk` are behind `min_clock`, for
  // Status: "worker 1 (56 applied)". Empty when none (or unknown chunk).
  std::string Lagging(int32_t chunk, int64_t min_clock) const;
  // The optimizer's state of `chunk` (checked) into `out`: its updates so
  // far and its state arrays, unstrided. UNIMPLEMENTED for an optimizer
  // that is not elementwise; an error from offloading.
  absl::Status ReadState(int32_t chunk, ChunkState* out) const;
  // Gives `state.chunk()` (checked) the optimizer state `state` if it still
  // waits for its initial values (else ignored). INVALID_ARGUMENT for a
  // state of another size; as ReadState's otherwise.
  absl::Status WriteState(const ChunkState& state);
  // Writes the chunk's weights to `out` (ChunkNumel(chunk) values, little
  // endian, in `dtype`; any alignment) and what they hold to *clocks: the
  // per-worker applied clocks, and of `worker`'s own pushes how many are
  // applied and held (applied, or in the BSP round being collected).
  // Traces the read for `worker`. An error only from offloading.
  absl::Status Read(int worker, int64_t clock, int64_t min_clock, int32_t chunk, DType dtype,
                    char* out, PulledClocks* clocks) const;

  // HeldRounds (server/held_rounds.h): BSP clipping by the global norm (the
  // job clips under BSP) holds a closed round's mean gradient until
  // ApplyHeldRounds; until then the round's read guarantee does not hold.
  bool holds_rounds() const override { return hold_rounds_; }
  int num_chunks() const override { return static_cast<int>(chunks_.size()); }
  void SetRoundListener(Listener* listener) override;
  absl::StatusOr<HeldRound> SumHeldSquares() const override;
  absl::Status ApplyHeldRounds(int64_t generation, float scale) override;

  // Checkpoints: each chunk goes to `writer` (with its weights, optimizer
  // state and step count, under its lock) whenever `schedule` says its
  // clock -- the iterations applied to it by every worker -- is due. Call
  // before the first push; both outlive the store.
  void SetCheckpointing(CheckpointWriter* writer, const CheckpointSchedule* schedule);
  // The chunks as a checkpoint lays them out.
  std::vector<CheckpointWriter::Chunk> CheckpointLayout() const;

  // ---- Standby (server/chunk_store_standby.cc) ----
  // Where the changes of served chunks with a standby go; before the
  // first push, outliving the store.
  void SetChunkSink(ChunkSink* sink);
  // Its chunks as standby parts (roles, copies forgotten, what Status
  // reports: server/standby_parts.h).
  StandbyParts& standby() { return standby_; }
  const StandbyParts& standby() const { return standby_; }
  // The server whose chunk `chunk` is by the partition; -1 for one not held here.
  int HomeOf(int32_t chunk) const;
  // UNAVAILABLE when `chunk` (one of this server's) is a standby copy here.
  absl::Status CheckServed(int32_t chunk) const;
  // Whether `worker`'s push of `clock` to `chunk` is held by the standby
  // (or needs none); false once the chunk is not served here (demoted:
  // the push must go to its new primary).
  bool Replicated(int32_t chunk, int worker, int64_t clock) const;
  // Standby copies: whether `worker`'s push of `clock` (of `generation`)
  // to `chunks` is early on some of them (ChunkClocks::Early) and would be
  // taken once their open rounds are applied: every chunk served here, of
  // that generation, the worker live. Such a push waits at the server
  // (PsService::HandlePush) instead of being refused.
  bool PushEarly(int worker, int64_t clock, int64_t generation,
                 const std::vector<int32_t>& chunks) const;
  // The standby holds `chunk`'s change `version`, after which the applied
  // clocks were `applied`.
  void Confirmed(int32_t chunk, int64_t version, const std::vector<int64_t>& applied);
  // The whole state of a served chunk, as a full update.
  absl::StatusOr<ChunkUpdate> FullUpdate(int32_t chunk) const;
  // Where WholeState writes a chunk's weights and state.
  struct WholeRoom {
    char* weights = nullptr;
    char* state = nullptr;
  };
  // FullUpdate into memory of the caller's: `*meta` gets all of it but the
  // weights and the state, which are written where room(weight bytes,
  // state bytes) -- called once, `*meta` filled -- says.
  absl::Status WholeState(
      int32_t chunk, ChunkUpdate* meta,
      absl::FunctionRef<WholeRoom(int64_t weight_bytes, int64_t state_bytes)> room) const;
  // The bytes of a chunk's weights and optimizer state (0: not held here).
  int64_t WholeBytes(int32_t chunk) const;
  // A standby copy takes its primary's change, whose gradient is `grad`
  // (empty: no step; `update.grad` is not read); *need_full when it does
  // not follow the copy (which then needs the whole state).
  // INVALID_ARGUMENT for an unknown chunk or a change of another size,
  // FAILED_PRECONDITION for a chunk served here.
  absl::Status Mirror(const ChunkUpdate& update, absl::Span<const float> grad, bool* need_full);
  // A replacement joins a cluster whose generation `generation` goes on
  // (no rollback): its chunks are standby copies to be filled.
  void JoinAsStandby(int64_t generation);

  // Leaves `worker` out from now on (the scheduler declared it dead): BSP
  // rounds close over the other workers (a round it already pushed to keeps
  // its gradient), the read guarantee and the applied clocks ignore it, and
  // its pushes are refused. Idempotent.
  void RemoveWorker(int worker);

  // Min over owned chunks and live workers of the iterations applied.
  int64_t MinAppliedClock() const;
  int64_t NumParams() const { return num_params_; }
  // Elements of one of this server's chunks (0 for another's).
  int64_t ChunkNumel(int32_t chunk) const;
  // The job (as the scheduler completed it).
  const JobSpec& job() const { return job_; }
  // The pool the updates run on (null: none), and whether the chunks are
  // offloaded to disk (then read in the order asked, on the caller).
  ThreadPool* pool() const { return pool_; }
  bool offloaded() const { return memory_ != nullptr && memory_->offloaded(); }
  // Bytes of weights, optimizer state and BSP round sums held.
  int64_t BytesHeld() const { return bytes_held_; }
  // Chunks' gradients not applied because they held a NaN or an Inf
  // (server/nonfinite.h).
  int64_t NonfiniteSkipped() const { return nonfinite_.skipped(); }
  const std::vector<int32_t>& chunk_ids() const { return chunk_ids_; }
  int num_workers() const { return num_workers_; }
  int standby_copies() const { return job_.standby_copies(); }

 private:
  // A chunk's plan (fixed) and its state.
  struct Chunk : ChunkPlan, StandbyPart {
    // Its clocks' members are its pushers.
    explicit Chunk(ChunkPlan plan) : ChunkPlan(std::move(plan)), StandbyPart(pushers) {}
    int64_t steps ABSL_GUARDED_BY(mu) = 0;  // optimizer updates so far
    // The BSP round's sum(num_samples * grad) is in the slab's grad.
    int64_t round_samples ABSL_GUARDED_BY(mu) = 0;
    // The samples of the round's pushes without a gradient (Part::absent):
    // in the divisor of the round's mean, nothing in its sum.
    int64_t round_absent_samples ABSL_GUARDED_BY(mu) = 0;
    // The round's hyperparameters: its last push's (PushRequest.hyper).
    std::shared_ptr<const OptimizerSpec> round_hyper ABSL_GUARDED_BY(mu);
    // Held for global clipping: the round's mean waits in the slab's grad.
    bool round_closed ABSL_GUARDED_BY(mu) = false;
    int64_t checkpointed ABSL_GUARDED_BY(mu) = 0;  // last clock written
    // False while an EXTERNAL model's chunk waits for its initial weights.
    bool has_values ABSL_GUARDED_BY(mu) = true;
    // Its state went to the store placed anew (Adopt): Pin refuses it.
    bool given ABSL_GUARDED_BY(mu) = false;
    // Empties the round being collected (its sum is overwritten by the
    // next round's first push).
    void ClearRound() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      round_samples = 0;
      round_absent_samples = 0;
      round_closed = false;
    }
    void Promoted() override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { ClearRound(); }
  };
  using Slab = ChunkMemory::Slab;
  // The chunk's arrays, resident while the Slab lives (offloaded: read from
  // the file if need be, and the next chunk read ahead); FAILED_PRECONDITION
  // once the chunk was given to the store placed anew.
  absl::StatusOr<Slab> Pin(const Chunk& c) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // BSP: turns the round's sum into its mean and applies it (or, with
  // global clipping, holds it and tells the listener).
  // `averaged`: the push that closed the round already divided the sum by
  // the round's samples.
  void CloseRound(Chunk& c, const Slab& slab, bool averaged) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // A served chunk changed: its applied clocks moved, after an optimizer
  // step of iteration `clock` with `grad` (null: none) under `hyper`
  // (null: the job's), or (`full`) otherwise. Goes to the sink when the
  // chunk has a standby, else counts as replicated.
  void Ship(Chunk& c, int64_t clock, const float* grad, const OptimizerSpec* hyper,
            bool full = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // The changes shipped so far may go (ChunkSink::Flush).
  void FlushShipped() const;
  // Every served chunk with a standby has applied the same clocks (BSP:
  // the clock's rounds here are all closed).
  bool RoundsEven() const;
  // INVALID_ARGUMENT for a change out of range (clocks, version, the
  // hyperparameters) from a sender of Replicate.
  absl::Status CheckUpdate(const ChunkUpdate& u) const;
  // Restore's checks of `set`, before anything changes.
  absl::Status CheckRestorable(const CheckpointSet& set, int64_t clock) const;
  // Takes a full update into a standby copy.
  absl::Status TakeFull(Chunk& c, const ChunkUpdate& u) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // Writes a whole state's weights, optimizer state, steps and values
  // into `c` (INVALID_ARGUMENT, nothing written, for another size).
  // TakeWhole: the same from `before`'s chunk `c.id` -- its slab itself
  // where both stores are in memory, else a copy -- which `before` refuses
  // from then on (INTERNAL when it holds none of that size).
  absl::Status TakeWhole(Chunk& c, ChunkStore& before) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  absl::Status PutWhole(Chunk& c, const Slab& slab, const ChunkUpdate& u)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // A restore's or an adoption's start of `generation` at `clock` for `c`,
  // its state in place; then, once for the store, the rounds dropped and
  // the later checkpoint files deleted.
  void StartGeneration(Chunk& c, int64_t generation, int64_t clock)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  void RestoreDone(int64_t clock);
  // Whether `c` is this server's own (checkpointed here).
  bool Home(const Chunk& c) const { return c.home == server_id_; }
  // Writes `c` to the checkpoint when its applied clock calls for it.
  void MaybeCheckpoint(Chunk& c, const Slab& slab) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);

  Chunk* Find(int32_t chunk) const;
  // The state arrays ReadState and WriteState carry for `c` (a buffer's:
  // none); UNIMPLEMENTED for an optimizer that is not elementwise.
  absl::StatusOr<int> StateArrays(const Chunk& c) const;
  // Checks a request before anything of it is applied (see Push).
  absl::Status CheckPush(const PushRequest& push) const;
  // Writes initial values to the chunks without values yet (see Push).
  absl::Status TakeInitialValues(const PushRequest& push,
                                 const std::function<absl::Span<const float>(size_t part)>& values);
  // Applies one part (checked), racing other pushes only of other workers.
  // Applies every part (ApplyPart), on the pool where the push allows it;
  // the first part's error by order, the others applied all the same (a
  // retry finds them taken).
  absl::Status ApplyParts(const PushRequest& push,
                          const std::function<absl::Span<const float>(size_t part)>& grad);
  absl::Status ApplyPart(const PushRequest& push, const PushRequest::Part& part,
                         absl::Span<const float> grad);
  // Whether a push of `worker` counts for `c`: for a BROADCAST buffer's
  // chunk, only the lowest live pusher's does.
  static bool TakesValues(const Chunk& c, int worker) ABSL_SHARED_LOCKS_REQUIRED(c.mu);
  // One optimizer step of iteration `clock` with gradient `grad`, under
  // the job's rules or those of `hyper` (null: none); a buffer's chunk
  // takes `grad` as its values.
  // `split`: over the pool's threads (else on the caller's alone, as a
  // standby copy's: the same values, without waking the pool).
  void Apply(Chunk& c, const Slab& slab, int64_t clock, const float* grad,
             const OptimizerSpec* hyper, bool split = true) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // fn(k, chunk) for each of this server's chunks, k its index in chunk_ids_:
  // over the pool's threads, each chunk on one of them, or in order on the
  // caller when the slabs are offloaded (one pin per thread, read ahead in
  // order), a chunk is large enough for its update to be split over the
  // pool (ElementwiseOptimizer), or there is no pool.
  void ForEachChunk(absl::FunctionRef<void(size_t, Chunk&)> fn) const;
  void TraceApply(int worker, int64_t clock, int32_t chunk) const;
  // BSP: applies the closed round's mean (the slab's grad) scaled by `scale` (no
  // step when no push of the round was finite) and opens the next round.
  void ApplyRound(Chunk& c, const Slab& slab, float scale) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);

  // The chunk's initial weights (from the job seed) and optimizer state.
  absl::Status Initialize(Chunk& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // INVALID_ARGUMENT / UNAVAILABLE unless `generation` is the chunk's.
  absl::Status CheckChunkGeneration(const Chunk& c, int64_t generation) const
      ABSL_SHARED_LOCKS_REQUIRED(c.mu);

  const JobSpec job_;
  const int server_id_;
  const std::vector<ParamInfo> params_;
  const int num_workers_;
  const bool bsp_;
  const std::shared_ptr<const Optimizer> optimizer_;  // the job's
  const UpdateRules rules_;
  ThreadPool* pool_;
  TraceWriter* trace_;
  std::vector<int32_t> chunk_ids_;
  std::unordered_map<int32_t, std::unique_ptr<Chunk>> chunks_;
  std::unique_ptr<ChunkMemory> memory_;  // null when it could not be made
  absl::Status memory_error_;            // why
  int64_t num_params_ = 0;
  int64_t largest_chunk_ = 0;  // elements
  int64_t bytes_held_ = 0;
  std::atomic<int64_t> generation_{0};
  std::atomic<int64_t> restore_clock_{0};  // the clock generation_ began at

  CheckpointWriter* checkpoint_ = nullptr;
  const CheckpointSchedule* checkpoint_schedule_ = nullptr;  // with checkpoint_

  const bool hold_rounds_;  // BSP with clip_norm > 0
  NonfiniteRule nonfinite_;
  // Taken inside a chunk's lock, and around every call to the listener, so
  // that none is under way once SetRoundListener returns.
  mutable absl::Mutex listener_mu_;
  Listener* listener_ ABSL_GUARDED_BY(listener_mu_) = nullptr;
  std::atomic<ChunkSink*> sink_{nullptr};
  StandbyParts standby_;  // over chunks_
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_CHUNK_STORE_H_
