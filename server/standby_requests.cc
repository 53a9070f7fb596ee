#include "server/standby_requests.h"

#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/status_macros.h"
#include "common/tensor_wire.h"

namespace pstrain {
namespace {

// Chunk update `u`'s gradient: in the primary's segment (`segment`, laid
// out as `layout`), or copied out of the message (a protobuf string need
// not be aligned) into `copy`; empty: no step.
absl::StatusOr<absl::Span<const float>> GradientOf(const ChunkUpdate& u, const ShmSegment* segment,
                                                   const ShmLayout& layout, int64_t numel,
                                                   std::vector<float>* copy) {
  if (u.grad_in_shm()) {
    if (segment == nullptr || !layout.Has(u.chunk())) {
      return absl::InvalidArgumentError(
          absl::StrCat("replicate: chunk ", u.chunk(), "'s gradient in no segment"));
    }
    return absl::MakeConstSpan(
        reinterpret_cast<const float*>(segment->data() + layout.Offset(u.chunk())), numel);
  }
  if (u.grad().empty()) return absl::Span<const float>();
  if (u.grad().size() % sizeof(float) != 0) {
    return absl::InvalidArgumentError("replicate: a partial value");
  }
  copy->resize(u.grad().size() / sizeof(float));
  std::memcpy(copy->data(), u.grad().data(), copy->size() * sizeof(float));
  return absl::MakeConstSpan(*copy);
}

absl::Status MirrorChunks(const ChunkRequests& chunks, const ReplicateRequest& req,
                          const std::function<int(int)>& serving, ReplicateResponse* out) {
  ChunkStore& store = chunks.store();
  std::shared_ptr<ShmSegment> segment;  // holds the gradients marked grad_in_shm
  if (req.shm_segment() != 0) RETURN_IF_ERROR(chunks.Segment(req.shm_segment(), &segment));
  thread_local std::vector<float> copy;  // a message's gradient, aligned
  for (const ChunkUpdate& u : req.updates()) {
    const int home = store.HomeOf(u.chunk());
    if (home < 0) return store.CheckChunk(u.chunk());
    if (serving(home) != req.from_server()) {
      return absl::FailedPreconditionError(absl::StrCat("replicate: server ", req.from_server(),
                                                        " does not serve chunk ", u.chunk(),
                                                        " (server ", serving(home), " does)"));
    }
    ASSIGN_OR_RETURN(
        const absl::Span<const float> grad,
        GradientOf(u, segment.get(), chunks.shm_layout(), store.ChunkNumel(u.chunk()), &copy));
    bool need_full = false;
    RETURN_IF_ERROR(store.Mirror(u, grad, &need_full));
    if (need_full) out->add_need_full(u.chunk());
  }
  return absl::OkStatus();
}

absl::Status MirrorTables(SparseTables* tables, const ReplicateRequest& req,
                          const std::function<int(int)>& serving, ReplicateResponse* out) {
  if (req.tables_size() == 0) return absl::OkStatus();
  if (req.table_home() < 0) return absl::InvalidArgumentError("replicate: a negative table_home");
  if (tables == nullptr || serving(req.table_home()) != req.from_server()) {
    return absl::FailedPreconditionError(absl::StrCat("replicate: server ", req.from_server(),
                                                      " does not serve the tables of server ",
                                                      req.table_home()));
  }
  for (const TableUpdate& u : req.tables()) {
    bool need_full = false;
    RETURN_IF_ERROR(tables->Mirror(req.table_home(), u, &need_full));
    if (need_full) out->add_need_full_tables(u.table());
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status AnswerReplicate(const ChunkRequests& chunks, SparseTables* tables,
                             const grpc::ByteBuffer& raw, const std::function<int(int)>& serving,
                             grpc::ByteBuffer* resp, uint64_t bell_segment) {
  ReplicateRequest req;
  if (!ParseSmall(raw, &req)) {
    return absl::InvalidArgumentError("replicate: the request is not a ReplicateRequest");
  }
  if (bell_segment != 0 && req.shm_segment() != bell_segment) {
    return absl::InvalidArgumentError(
        "replicate: a frame on a segment's socket names another segment");
  }
  RETURN_IF_ERROR(chunks.store().CheckGeneration(req.generation()));
  ReplicateResponse out;
  RETURN_IF_ERROR(MirrorChunks(chunks, req, serving, &out));
  RETURN_IF_ERROR(MirrorTables(tables, req, serving, &out));
  *resp = SerializeSmall(out);
  return absl::OkStatus();
}

}  // namespace pstrain
