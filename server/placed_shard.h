// A server's shard of the job by a placement (common/placement.h): its
// chunk store, with the sparse tables' part, made now or -- for a move's
// switch (scheduler/placement_moves.h) -- ahead of it, while training goes
// on. At a switch the shard placed anew is filled with what the server keeps
// and what was handed over (Shard::Adopt): the chunks it keeps are given to
// the new store (their slabs, not copies of them), those handed over are
// copied in. Made ahead, the slabs of those handed over have their pages
// faulted in already, which is most of what making it costs (on a loaded
// host -- a VM above all -- a page fault of a fresh slab costs more than
// copying the page), so the switch itself only copies what came. The
// server's runtime installs it. No gRPC.
#ifndef PSTRAIN_SERVER_PLACED_SHARD_H_
#define PSTRAIN_SERVER_PLACED_SHARD_H_

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/partition.h"
#include "common/shm.h"
#include "common/thread_pool.h"
#include "common/trace.h"
#include "proto/job.pb.h"
#include "server/chunk_store.h"
#include "server/memory_plan.h"
#include "server/shard.h"

namespace pstrain {

// What a shard is made of, the same for every placement.
struct ShardInputs {
  const JobSpec* job = nullptr;
  int server_id = 0;
  ThreadPool* pool = nullptr;    // the updates' threads (shared by every placement)
  TraceWriter* trace = nullptr;  // may be null
  OffloadOptions offload;        // .dir empty: in memory
  std::string table_spill_dir;
};

struct PlacedShard {
  Placement placement;
  Partition partition;
  ShmLayout shm_layout;  // where the store's chunks lie in a worker's segment
  std::shared_ptr<ChunkStore> store;
  std::shared_ptr<Shard> shard;
  std::optional<ServerMemoryPlan> plan;  // offloaded: the budget's shares
};

// The shard of `placement`, its chunks holding `start` values; the slabs
// of the chunks `fault_in` names (null: none; made ahead, it is not) have
// their pages faulted in now, in memory (OffloadOptions::fault_in).
// INVALID_ARGUMENT for a job the partition or optimizer cannot take, the
// store's errors (RESOURCE_EXHAUSTED: no memory for it).
absl::StatusOr<PlacedShard> PlaceShard(const ShardInputs& in, const Placement& placement,
                                       ChunkStore::StartValues start,
                                       std::function<bool(int32_t chunk)> fault_in = nullptr);

// The shard of a move's placement made on a thread of its own, ahead of the
// switch. Thread-safe.
class ShardAhead {
 public:
  explicit ShardAhead(ShardInputs in) : in_(std::move(in)) {}
  ~ShardAhead();  // waits for the one being made

  // Starts making the shard of placement `to` (no initial values: a switch
  // writes every chunk), the slabs of the chunks this server takes in the
  // move from `from` faulted in, unless it is the
  // one made already; one of another placement is dropped. `to` of
  // version 0: drops it.
  void Start(const Placement& from, const Placement& to);
  // The shard of placement `version` (taken out), once made; nullopt when
  // none was started for it or making it failed (logged): the switch makes
  // its own then.
  std::optional<PlacedShard> Take(int64_t version);

 private:
  const ShardInputs in_;
  absl::Mutex mu_;
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  std::future<absl::StatusOr<PlacedShard>> made_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_PLACED_SHARD_H_
