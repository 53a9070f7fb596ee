// gRPC glue of the parameter server: validates requests, hands them to the
// ChunkStore, and parks pulls until their read guarantee holds. Push and Pull
// are raw methods: their payloads move between gRPC's slices and the store
// without protobuf copies (common/tensor_wire.h); Status is raw too, so that
// bytes that are not a StatusRequest get INVALID_ARGUMENT.
//
// Every method is served on the async API by the threads that call Serve,
// one per completion queue: the thread that reads a call also answers it,
// and no other gRPC thread polls in the server, so a call costs no hand-off
// between threads (gRPC's callback API passes each event between two
// threads).
#ifndef PSTRAIN_SERVER_PS_SERVICE_H_
#define PSTRAIN_SERVER_PS_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/tensor_wire.h"
#include "proto/ps.grpc.pb.h"
#include "server/byte_budget.h"
#include "server/chunk_store.h"
#include "server/shm_registry.h"
#include "server/sparse_tables.h"

namespace pstrain {

using PsServiceBase = ParameterServer::WithRawMethod_Push<
    ParameterServer::WithRawMethod_Pull<ParameterServer::WithRawMethod_Status<
        ParameterServer::WithRawMethod_OpenShm<ParameterServer::WithRawMethod_PullRows<
            ParameterServer::WithRawMethod_PushRows<ParameterServer::Service>>>>>>;

class PsService final : public PsServiceBase {
 public:
  PsService() : start_(absl::Now()) {}
  // Stops the shared-memory registry's thread first: it calls into the
  // service.
  ~PsService() override;

  // Makes the service answer pushes and pulls; until then they get
  // UNAVAILABLE. Call once.
  void SetStore(std::shared_ptr<ChunkStore> store, int64_t total_clocks);
  // Makes it answer PullRows and PushRows from `tables`. Before SetStore.
  void SetTables(std::shared_ptr<SparseTables> tables);
  void SetIdentity(int id, const std::string& address);
  // Gives workers on this host shared memory (OpenShm); without it OpenShm
  // is refused and every payload moves in the messages. Their pushes and
  // pulls may then also come as frames on the segment's socket (Ring)
  // instead of gRPC calls. Before Serve.
  void SetShm(std::unique_ptr<ShmRegistry> shm);
  // Marks the job's end in Status (state FINISHED or FAILED).
  void SetState(MemberState state, const std::string& message);
  // Answers the parked pulls of generations before `before` with `status`
  // (all of them by default: shutdown; a rollback's restore: the older
  // ones).
  void CancelParked(const grpc::Status& status,
                    int64_t before = std::numeric_limits<int64_t>::max());
  // Bytes of pull replies built and not yet sent, at most (an offloaded
  // server's share of its budget, server/memory_plan.h): a pull whose
  // guarantee holds waits parked until its reply fits (one reply alone
  // always goes). Unbounded until called.
  void SetReplyLimit(int64_t bytes) { replies_.SetLimit(bytes); }
  // Bytes of push requests each worker may have in flight here, as push
  // responses tell the workers (PushResponse.window_bytes; 0: no bound).
  void SetPushWindow(int64_t bytes) { push_window_ = bytes; }
  // The most reply bytes that were ever in flight at once.
  int64_t peak_reply_bytes() const { return replies_.peak(); }

  // Serves calls arriving on `cq` (a queue of the server this service is
  // registered with) until the queue is shut down and drained.
  void Serve(grpc::ServerCompletionQueue* cq);
  // Call before shutting the server and its queues down: no new calls are
  // asked for after it.
  void StopServing();

  MemberStatus GetStatus() const;
  // Pushes and pulls refused as malformed (INVALID_ARGUMENT) so far.
  int64_t refused() const { return refused_.load(std::memory_order_relaxed); }
  // Answers the parked pulls (of chunks and of rows) whose guarantee now
  // holds (after the store applied updates on its own, e.g. a globally
  // clipped BSP round, or a dead worker was left out).
  void WakePulls();

  // The request handling below the gRPC glue (public for the fuzz targets):
  // validates a push and hands it to the store, whole or not at all.
  // `bell_segment`: the segment of the connection a frame came on (0: a
  // gRPC call), the only one the push may name.
  grpc::Status DoPush(ChunkStore& store, const grpc::ByteBuffer& req, uint64_t bell_segment = 0);
  // Parses and validates a pull into *req.
  grpc::Status CheckPull(const ChunkStore& store, const grpc::ByteBuffer& raw,
                         PullRequest* req) const;
  // The reply to a pull whose guarantee holds.
  grpc::Status FillPull(const ChunkStore& store, const PullRequest& req, grpc::ByteBuffer* resp);
  // The answer to OpenShm.
  grpc::Status GrantShm(const grpc::ByteBuffer& raw, grpc::ByteBuffer* resp);
  // PullRows: parses the request into *req (INVALID_ARGUMENT, counted, when
  // malformed), and the reply once its read guarantee holds.
  grpc::Status CheckPullRows(SparseTables& tables, const grpc::ByteBuffer& raw,
                             PullRowsRequest* req) const;
  grpc::Status FillPullRows(SparseTables& tables, const PullRowsRequest& req,
                            grpc::ByteBuffer* resp);
  // The answer to PushRows.
  grpc::Status DoPushRows(SparseTables& tables, const grpc::ByteBuffer& raw,
                          grpc::ByteBuffer* resp);

 private:
  class Call;
  // Asks for the next call of `method` on `cq` (unless stopping).
  void Accept(int method, grpc::ServerCompletionQueue* cq);
  void Handle(Call* call);
  // Sends `st` (and the reply, if OK) unless the call ended meanwhile, drops
  // the handling reference; counts an INVALID_ARGUMENT among requests_refused.
  void Conclude(Call* call, const grpc::Status& st);
  // Handle's parts: a PullRows or PushRows; a pull of chunks (answered, or
  // parked until its read guarantee holds).
  void HandleRows(Call* call);
  // Answers the parked PullRows whose read guarantee now holds (and drops
  // those cancelled meanwhile).
  void WakeRowPulls(SparseTables& tables);
  void HandlePull(ChunkStore& store, Call* call);
  // A push or pull that came as a frame on a segment's socket: handled like
  // a call, answered through `bell`.
  void Ring(std::shared_ptr<ShmBell> bell, ShmFrame frame);
  // A newer pull came on `call`'s connection: its worker no longer waits
  // for the parked pulls of its older attempts (no cancellation comes on a
  // socket, as gRPC's would). Under parked_mu_.
  void DropOlderPulls(const Call& call) ABSL_EXCLUSIVE_LOCKS_REQUIRED(parked_mu_);

  std::shared_ptr<ChunkStore> store() const;
  std::shared_ptr<SparseTables> tables() const;
  // A request's segment (PushRequest/PullRequest.shm_segment) and where its
  // chunks lie in it; NOT_FOUND when this server holds no such segment (it
  // restarted, or the worker's connection closed): the worker then sends
  // the payloads in messages.
  grpc::Status Segment(uint64_t id, std::shared_ptr<ShmSegment>* segment) const;
  // A shared-memory push's chunks (empty payloads in the message): each
  // pointed at its push slot, `width` bytes a value; INVALID_ARGUMENT for a
  // payload in the message or a chunk this server does not hold.
  grpc::Status PlaceInSlots(int width, std::vector<PayloadRef>* chunks) const;
  bool Readable(const ChunkStore& store, const PullRequest& req) const;
  // Counts the reply to `call`'s pull (readable) against the reply limit;
  // false when it must wait for room.
  bool TakeReplyRoom(const ChunkStore& store, Call* call);
  // A call's reply left (or was never sent): its bytes are room again, for
  // the pulls waiting (the caller wakes them). False when it held none.
  bool GiveReplyRoom(Call* call);
  // What a parked pull waits for, for Status.
  std::string ParkedWhat(const ChunkStore* store, const Call& call) const;

  const absl::Time start_;
  mutable absl::Mutex mu_;
  std::shared_ptr<ChunkStore> store_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<SparseTables> tables_ ABSL_GUARDED_BY(mu_);
  int64_t total_clocks_ ABSL_GUARDED_BY(mu_) = 0;
  int id_ ABSL_GUARDED_BY(mu_) = -1;
  std::string address_ ABSL_GUARDED_BY(mu_);
  MemberState state_ ABSL_GUARDED_BY(mu_) = REGISTERED;
  // Set once by SetStore: where the store's chunks lie in a segment.
  ShmLayout shm_layout_;
  std::unique_ptr<ShmRegistry> shm_;  // set before serving
  std::string boot_id_;
  std::string message_ ABSL_GUARDED_BY(mu_);

  std::atomic<int64_t> refused_{0};
  ByteBudget replies_;  // pull replies built and not yet sent
  std::atomic<int64_t> push_window_{0};
  mutable absl::Mutex parked_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::vector<Call*> parked_ ABSL_GUARDED_BY(parked_mu_);  // each holds a reference
  std::vector<Call*> parked_rows_ ABSL_GUARDED_BY(parked_mu_);  // PullRows, likewise

  absl::Mutex accept_mu_;
  bool stopping_ ABSL_GUARDED_BY(accept_mu_) = false;

  std::atomic<int64_t> bytes_in_{0}, bytes_out_{0}, pushes_{0}, pulls_{0}, shm_bytes_{0},
      shm_rings_{0};
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_PS_SERVICE_H_
