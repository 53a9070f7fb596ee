#include "server/handover_requests.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/placement.h"
#include "common/rows.h"
#include "common/status_macros.h"
#include "common/tensor_wire.h"
#include "proto/ps.pb.h"
#include "server/answer_room.h"

namespace pstrain {
namespace {

// Writes `v` as a varint at `out`; the bytes written.
size_t PutVarint(uint64_t v, char* out) {
  size_t n = 0;
  for (; v >= 0x80; v >>= 7) out[n++] = static_cast<char>(v | 0x80);
  out[n++] = static_cast<char>(v);
  return n;
}

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  for (; v >= 0x80; v >>= 7) ++n;
  return n;
}

// A length-delimited field's tag (field numbers below 16: one byte).
char LengthTag(int field) { return static_cast<char>(field << 3 | 2); }

// Chunk `chunk`'s whole state at `clock`, or why not yet (or no longer),
// as one HandOverResponse.chunks field -- protobuf's encoding, the
// metadata first, then the weights and the state -- written once from the
// chunk into `room` (null, or used up: memory as it comes).
absl::StatusOr<grpc::Slice> ChunkAt(const ChunkStore& store, int32_t chunk, int64_t clock,
                                    const std::shared_ptr<AnswerRoom>& room) {
  RETURN_IF_ERROR(store.CheckChunk(chunk));
  if (!store.Readable(chunk, clock)) {
    return absl::UnavailableError(absl::StrCat("handover: chunk ", chunk, " has not reached clock ",
                                               clock, " yet (", store.Lagging(chunk, clock), ")"));
  }
  ChunkUpdate meta;
  grpc::Slice slice;
  RETURN_IF_ERROR(store.WholeState(chunk, &meta, [&](int64_t weight_bytes, int64_t state_bytes) {
    const size_t meta_bytes = meta.ByteSizeLong();
    const size_t inner = meta_bytes + 1 + VarintSize(weight_bytes) + weight_bytes + 1 +
                         VarintSize(state_bytes) + state_bytes;
    const size_t total = 1 + VarintSize(inner) + inner;
    char* out = room == nullptr ? nullptr : room->Take(total);
    if (out != nullptr) {
      slice = AnswerRoom::SliceOf(room, out, total);
    } else {
      slice = grpc::Slice(total);
      out = reinterpret_cast<char*>(const_cast<uint8_t*>(slice.begin()));
    }
    size_t at = 0;
    out[at++] = LengthTag(HandOverResponse::kChunksFieldNumber);
    at += PutVarint(inner, out + at);
    meta.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(out + at));
    at += meta_bytes;
    ChunkStore::WholeRoom to;
    out[at++] = LengthTag(ChunkUpdate::kWeightsFieldNumber);
    at += PutVarint(weight_bytes, out + at);
    to.weights = out + at;
    at += weight_bytes;
    out[at++] = LengthTag(ChunkUpdate::kStateFieldNumber);
    at += PutVarint(state_bytes, out + at);
    to.state = out + at;
    return to;
  }));
  if (std::any_of(meta.applied().begin(), meta.applied().end(),
                  [clock](int64_t a) { return a > clock; })) {
    return absl::FailedPreconditionError(absl::StrCat("handover: chunk ", chunk,
                                                      " has gone past clock ", clock, " (applied ",
                                                      absl::StrJoin(meta.applied(), ","), ")"));
  }
  return slice;
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
  // (A taker asks before the clock: the answers' rooms are made meanwhile.)
  shard.PrepareToGive({req.chunks().begin(), req.chunks().end()});
  std::vector<grpc::Slice> slices;
  for (int32_t chunk : req.chunks()) {
    ASSIGN_OR_RETURN(slices.emplace_back(),
                     ChunkAt(store, chunk, req.clock(), shard.answer_room(chunk)));
  }
  HandOverResponse out;  // the rows, after the chunks
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
  if (out.has_rows()) slices.emplace_back(out.SerializeAsString());
  *resp = grpc::ByteBuffer(slices.data(), slices.size());
  return absl::OkStatus();
}

}  // namespace pstrain
