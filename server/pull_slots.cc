#include "server/pull_slots.h"

#include "common/status_macros.h"
#include "common/thread_pool.h"

namespace pstrain {
namespace {

// A pull's chunks are copied into the slots on the pool only when they
// hold this many values (ChunkStore's rule for pushes), at least
// kSlotsGrain chunks a task.
constexpr int64_t kParallelPullValues = 1 << 18;
constexpr int64_t kSlotsGrain = 4;

}  // namespace

absl::Status ReadIntoSlots(const ChunkStore& store, const ShmLayout& layout, const PullRequest& req,
                           const std::vector<int32_t>& ids, const ShmSegment& segment,
                           PulledClocks* clocks) {
  std::vector<PulledClocks> each(ids.size());
  std::vector<absl::Status> read(ids.size());
  auto fill = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      char* slot = segment.data() + layout.region_bytes() + layout.Offset(ids[i]);
      read[i] = store.Read(req.worker_id(), req.clock(), req.min_clock(), ids[i], req.dtype(),
                           slot, &each[i]);
    }
  };
  const auto n = static_cast<int64_t>(ids.size());
  int64_t values = 0;
  for (int32_t id : ids) values += store.ChunkNumel(id);
  ThreadPool* pool = store.pool();
  if (pool != nullptr && !store.offloaded() && n > kSlotsGrain &&
      values >= kParallelPullValues) {
    pool->ParallelFor(n, kSlotsGrain, fill);
  } else {
    fill(0, n);
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    RETURN_IF_ERROR(read[i]);
    clocks->Merge(each[i]);
  }
  return absl::OkStatus();
}

}  // namespace pstrain
