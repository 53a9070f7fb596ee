// The chunks' requests at a server (ParameterServer.Push, Pull, OpenShm),
// below the gRPC glue (server/ps_service.h) and above the store
// (server/chunk_store.h): a push decoded from gRPC's slices or from a
// worker's shared-memory segment, validated whole and handed to the store;
// a pull checked, its read guarantee tested, its reply's bytes counted, and
// the reply built in the message or in the
// worker's segment; the segments granted. Accepting, parking and answering
// calls, and the reply budget, are the service's.
#ifndef PSTRAIN_SERVER_CHUNK_REQUESTS_H_
#define PSTRAIN_SERVER_CHUNK_REQUESTS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/shm.h"
#include "common/tensor_wire.h"
#include "grpcpp/grpcpp.h"
#include "proto/ps.pb.h"
#include "server/chunk_store.h"
#include "server/compressed_push.h"
#include "server/pull_views.h"
#include "server/shm_registry.h"
#include "server/sparse_tables.h"

namespace pstrain {

// Payload bytes a server moved, its requests, and those refused as
// malformed: what its Status and metrics show. Both request families (the
// chunks', the rows') count here.
struct RequestCounters {
  std::atomic<int64_t> bytes_in{0}, bytes_out{0}, pushes{0}, pulls{0}, shm_bytes{0}, shm_rings{0};
  std::atomic<int64_t> replicated_bytes{0};  // sent to standbys (server/standby_sender.h)
};

// Which chunks a push took, from whom and of which iteration: with
// standby copies its answer waits until the standby holds them
// (ChunkRequests::PushReplicated).
struct PushTaken {
  int worker = -1;  // -1: nothing to wait for (initial values)
  int64_t clock = 0;
  int64_t generation = 0;
  std::vector<int32_t> chunks;
};

// Thread-safe, as the store is.
class ChunkRequests {
 public:
  // `store`'s chunks for a job of `total_clocks` clocks, laid out in a
  // segment as `shm_layout` says (ShmLayout::OfServer); `shm`: this host's
  // shared memory (null: none), `counters` the server's (both outlive the
  // object). `on_checkpoint_asked(clock)`: a push named a checkpoint the
  // scheduler asked for (PushRequest.checkpoint_clock > 0), which the
  // server's tables follow too.
  ChunkRequests(std::shared_ptr<ChunkStore> store, int64_t total_clocks, ShmLayout shm_layout,
                ShmRegistry* shm, RequestCounters* counters,
                std::function<void(int64_t)> on_checkpoint_asked);

  ChunkStore& store() const { return *store_; }
  const ShmLayout& shm_layout() const { return shm_layout_; }

  // Validates a push and hands it to the store, whole or not at all.
  // `bell_segment`: the segment of the connection a frame came on (0: a
  // gRPC call), the only one the push may name.
  // What it took goes to *taken (if not null).
  // Standby copies: a push the store refused only for being early
  // (ChunkStore::PushEarly) is named in *early (if not null; worker -1
  // otherwise), for the caller to keep it until it is due.
  absl::Status Push(const grpc::ByteBuffer& req, uint64_t bell_segment = 0,
                    PushTaken* taken = nullptr, PushTaken* early = nullptr);
  // Whether a push *early names is still early (ChunkStore::PushEarly).
  bool PushStillEarly(const PushTaken& early) const {
    return store_->PushEarly(early.worker, early.clock, early.generation, early.chunks);
  }
  // Standby copies: whether the push's standby holds what it took (or
  // the chunks are no longer served here: PushServed says).
  bool PushReplicated(const PushTaken& taken) const;
  bool PushServed(const PushTaken& taken) const;
  // Whether every chunk a pull names is served here.
  bool PullServed(const PullRequest& req) const;
  // A request's segment and where its chunks lie in it; NOT_FOUND when this
  // server holds no such segment (it restarted, or the worker's connection
  // closed): the worker then sends the payloads in messages.
  absl::Status Segment(uint64_t id, std::shared_ptr<ShmSegment>* segment) const;
  // Parses and validates a pull into *req.
  absl::Status CheckPull(const grpc::ByteBuffer& raw, PullRequest* req) const;
  // Whether the pull's read guarantee holds for every chunk it names.
  bool Readable(const PullRequest& req) const;
  // The bytes of the pull's reply in the message (0 when its payloads go
  // into its segment): what the reply budget counts.
  int64_t ReplyBytes(const PullRequest& req) const;
  // The reply to a pull whose guarantee holds: its payloads
  // (server/pull_payloads.h) in the message or in the worker's segment (a
  // compressed one naming a view not kept here: the chunks whose views the
  // worker must offer first, PullResponse.views_unknown).
  absl::Status FillPull(const PullRequest& req, grpc::ByteBuffer* resp);
  // The answer to OpenShm: a ticket for a segment of this server's layout.
  absl::Status GrantShm(const grpc::ByteBuffer& raw, grpc::ByteBuffer* resp) const;
  // The answer to ReadState: the optimizer's state of the chunks it names.
  absl::Status ReadState(const grpc::ByteBuffer& raw, grpc::ByteBuffer* resp) const;
  // The answer to WriteState: the optimizer's state the chunks start from.
  absl::Status WriteState(const grpc::ByteBuffer& raw, grpc::ByteBuffer* resp) const;
  // The answer to OfferViews: views a worker holds that a compressed
  // pull found not kept here (PullResponse.views_unknown).
  absl::Status OfferViews(const grpc::ByteBuffer& raw, grpc::ByteBuffer* resp) const;

 private:
  // A shared-memory pull's claim on its segment's pull slots (the caller
  // holds segment.pull_mu): only the newest attempt writes there, its
  // worker no longer reading an older one's answer; ABORTED for an older.
  static absl::Status ClaimPullSlots(const PullRequest& req, ShmSegment& segment);
  // A shared-memory push's chunks (empty payloads in the message): each
  // pointed at its push slot, `width` bytes a value (a compressed one: the
  // codec's bytes); INVALID_ARGUMENT for a
  // payload in the message or a chunk this server does not hold.
  absl::Status PlaceInSlots(int width, const CompressedPush& compressed,
                            std::vector<PayloadRef>* chunks) const;
  // Where a push's payloads are: in its segment's slots (`segment`) or in
  // the message (`reader`), in `dtype`.
  struct PayloadSource {
    DType dtype = FP32;
    const ShmSegment* segment = nullptr;
    SliceReader* reader = nullptr;
    // A payload's bytes, in place where they lie whole, else copied into a
    // per-thread buffer (valid until the next call on this thread).
    const char* Bytes(const PayloadRef& c) const;
    // A payload as `numel` fp32 values: fp32 lying whole and aligned in one
    // received slice is used in place; a slot's copied once (the worker can
    // write it at any time, and the store reads a part twice: the
    // finiteness check, then the update); 16-bit values converted. Valid
    // until the next call on this thread.
    absl::Span<const float> Values(const PayloadRef& c, int64_t numel) const;
  };
  // The push's parts as the store takes them (its compressed chunks decoded
  // into `compressed`), and their payload bytes; INVALID_ARGUMENT for a
  // payload of the wrong size or a malformed compressed one.
  absl::Status TakeParts(const PayloadSource& source, const std::vector<PayloadRef>& chunks,
                         CompressedPush* compressed, ChunkStore::PushRequest* push,
                         int64_t* bytes) const;

  const std::shared_ptr<ChunkStore> store_;
  const int64_t total_clocks_;
  ShmRegistry* const shm_;
  RequestCounters* const counters_;
  const ShmLayout shm_layout_;  // where the chunks lie in a segment
  const std::string boot_id_;
  const std::function<void(int64_t)> on_checkpoint_asked_;
  // Compressed pulls' views (the job's compression.pulls); null without.
  const std::unique_ptr<PullViews> views_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_CHUNK_REQUESTS_H_
