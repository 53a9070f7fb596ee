// A shared-memory pull's answer written into the worker's pull slots,
// over the store's thread pool where the pull is large enough (no gRPC).
#ifndef PSTRAIN_SERVER_PULL_SLOTS_H_
#define PSTRAIN_SERVER_PULL_SLOTS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "common/pulled_clocks.h"
#include "common/shm.h"
#include "proto/ps.pb.h"
#include "server/chunk_store.h"

namespace pstrain {

// Chunks `ids` of `store`, read for `req` (its worker, clock and read
// guarantee, in its dtype), into their pull slots in `segment` as `layout`
// places them; each chunk's read is its own, so they run on the store's
// pool for a pull of 256 K values or more. Their clocks merged into
// *clocks; the first chunk's error by order.
absl::Status ReadIntoSlots(const ChunkStore& store, const ShmLayout& layout, const PullRequest& req,
                           const std::vector<int32_t>& ids, const ShmSegment& segment,
                           PulledClocks* clocks);

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_PULL_SLOTS_H_
