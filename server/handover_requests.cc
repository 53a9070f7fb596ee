#include "server/handover_requests.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/placement.h"
#include "common/rows.h"
#include "common/status_macros.h"
#include "common/tensor_wire.h"
#include "proto/ps.pb.h"

namespace pstrain {
namespace {

// Chunk `chunk`'s whole state at `clock`, or why not yet (or no longer).
absl::StatusOr<ChunkUpdate> ChunkAt(const ChunkStore& store, int32_t chunk, int64_t clock) {
  RETURN_IF_ERROR(store.CheckChunk(chunk));
  if (!store.Readable(chunk, clock)) {
    return absl::UnavailableError(absl::StrCat("handover: chunk ", chunk, " has not reached clock ",
                                               clock, " yet (", store.Lagging(chunk, clock), ")"));
  }
  ASSIGN_OR_RETURN(ChunkUpdate u, store.FullUpdate(chunk));
  if (std::any_of(u.applied().begin(), u.applied().end(), [clock](int64_t a) { return a > clock; })) {
    return absl::FailedPreconditionError(
        absl::StrCat("handover: chunk ", chunk, " has gone past clock ", clock, " (applied ",
                     absl::StrJoin(u.applied(), ","), ")"));
  }
  return u;
}

}  // namespace

absl::Status AnswerHandOver(const Shard& shard, const grpc::ByteBuffer& raw,
                            grpc::ByteBuffer* resp) {
  HandOverRequest req;
  if (!ParseSmall(raw, &req)) {
    return absl::InvalidArgumentError("handover: the request is not a HandOverRequest");
  }
  const ChunkStore& store = *shard.store();
  RETURN_IF_ERROR(store.CheckGeneration(req.generation()));
  HandOverResponse out;
  for (int32_t chunk : req.chunks()) {
    ASSIGN_OR_RETURN(*out.add_chunks(), ChunkAt(store, chunk, req.clock()));
  }
  if (!req.table().empty()) {
    const Placement& to = req.placement();
    if (to.bucket_server_size() != kRowBuckets) {
      return absl::InvalidArgumentError(absl::StrCat("handover: a placement of ",
                                                     to.bucket_server_size(), " row buckets, not ",
                                                     kRowBuckets));
    }
    const int taker = req.to_server();
    ASSIGN_OR_RETURN(*out.mutable_rows(),
                     shard.tables()->HandOver(req.table(), req.clock(), [&](uint64_t id) {
                       return ServerOfRow(to, id) == taker;
                     }));
  }
  *resp = SerializeSmall(out);
  return absl::OkStatus();
}

}  // namespace pstrain
