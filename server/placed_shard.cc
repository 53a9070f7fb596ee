#include "server/placed_shard.h"

#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/daemon.h"
#include "common/logging.h"
#include "common/params.h"
#include "common/placement.h"
#include "common/simd.h"
#include "common/status_macros.h"
#include "server/optimizer.h"

namespace pstrain {
namespace {

absl::StatusOr<PlacedShard> Make(const ShardInputs& in, const Placement& placement,
                                 ChunkStore::StartValues start,
                                 std::function<bool(int32_t)> fault_in) {
  const JobSpec& job = *in.job;
  absl::StatusOr<Partition> partition =
      PlacedPartition(ModelParams(job.model()), job.chunk_bytes(), job.num_servers(), placement);
  absl::StatusOr<std::unique_ptr<Optimizer>> optimizer = MakeOptimizer(job.optimizer());
  for (const absl::Status& st : {partition.status(), optimizer.status()}) {
    if (!st.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad job spec from the scheduler: ", st.message()));
    }
  }
  PlacedShard placed;
  placed.placement = placement;
  OffloadOptions offload = in.offload;
  if (!offload.dir.empty()) {
    ServerMemoryNeeds needs = ChunkStore::MemoryNeeds(job, *partition, in.server_id, **optimizer);
    needs.workers = job.num_workers();
    ASSIGN_OR_RETURN(placed.plan, PlanServerMemory(offload.budget, needs));
    offload.budget = placed.plan->slabs;
  }
  offload.fault_in = std::move(fault_in);
  placed.shm_layout = ShmLayout::OfServer(*partition, in.server_id, job.standby_copies());
  RETURN_IF_ERROR(OutOfMemoryAsError("making the store", [&] {
    placed.store = std::make_shared<ChunkStore>(
        job, *partition, in.server_id, std::move(*optimizer), in.pool, in.trace, offload, start);
    return placed.store->health();
  }));
  placed.partition = *std::move(partition);
  RETURN_IF_ERROR(OutOfMemoryAsError("making the sparse tables", [&] {
    placed.shard =
        std::make_shared<Shard>(job, in.server_id, placed.store,
                                std::make_shared<SparseTables>(job, in.server_id, job.num_servers(),
                                                               in.table_spill_dir, placement));
    return absl::OkStatus();
  }));
  return placed;
}

}  // namespace

absl::StatusOr<PlacedShard> PlaceShard(const ShardInputs& in, const Placement& placement,
                                       ChunkStore::StartValues start,
                                       std::function<bool(int32_t)> fault_in) {
  const bool ahead = fault_in != nullptr;
  ASSIGN_OR_RETURN(PlacedShard placed, Make(in, placement, start, std::move(fault_in)));
  const ChunkStore& store = *placed.store;
  if (placed.plan.has_value()) {
    const ChunkMemoryStats m = store.memory_stats();
    spdlog::info(
        "chunk state offloaded to {}/server{}.slabs ({} bytes); of --memory_budget={}: {} for "
        "chunk state in memory, {} for requests and {} for replies in flight",
        in.offload.dir, in.server_id, m.disk_bytes, in.offload.budget, placed.plan->slabs,
        placed.plan->requests, placed.plan->replies);
  }
  spdlog::info(
      "{} {} chunks, {} parameters, {:.2f} bytes per parameter ({}, {} update threads, {} loops)",
      ahead ? absl::StrCat("made ahead for placement ", placement.version(), ":") : "holding",
      store.chunk_ids().size(), store.NumParams(),
      store.NumParams() > 0 ? double(store.BytesHeld()) / store.NumParams() : 0.0,
      OptimizerType_Name(in.job->optimizer().type()), in.pool->parallelism(), SimdLevel());
  return placed;
}

ShardAhead::~ShardAhead() {
  absl::MutexLock lock(&mu_);
  if (made_.valid()) made_.wait();
}

void ShardAhead::Start(const Placement& from, const Placement& to) {
  absl::MutexLock lock(&mu_);
  if (to.version() == version_) return;
  if (made_.valid()) made_.wait();  // (dropped when replaced)
  made_ = {};
  version_ = to.version();
  if (version_ == 0) return;
  // (The chunks it keeps come as they are: only those it takes are written.)
  const std::vector<int32_t> taking = ChunksLeaving(to, from, in_.server_id);
  made_ =
      std::async(std::launch::async,
                 [this, to, taking = absl::flat_hash_set<int32_t>(taking.begin(), taking.end())] {
                   return PlaceShard(in_, to, ChunkStore::StartValues::kNone,
                                     [&taking](int32_t chunk) { return taking.contains(chunk); });
                 });
}

std::optional<PlacedShard> ShardAhead::Take(int64_t version) {
  absl::MutexLock lock(&mu_);
  if (version != version_ || !made_.valid()) return std::nullopt;
  absl::StatusOr<PlacedShard> made = made_.get();
  version_ = 0;
  if (!made.ok()) {
    spdlog::warn("the shard of placement {} was not made ahead ({}): making it now", version,
                 made.status().message());
    return std::nullopt;
  }
  return *std::move(made);
}

}  // namespace pstrain
