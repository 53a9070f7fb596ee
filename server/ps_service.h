// The parameter server's gRPC glue: it accepts calls, dispatches each to
// its request family -- the chunks' (server/chunk_requests.h), the tables'
// rows (server/row_requests.h) -- parks the pulls whose read guarantee does
// not hold yet (server/parked_calls.h) until a push or a closed round makes
// it hold, and answers. Push and Pull are raw methods: their payloads move
// between gRPC's slices and the store without protobuf copies
// (common/tensor_wire.h); Status is raw too, so that bytes that are not a
// StatusRequest get INVALID_ARGUMENT. Pushes and pulls may also come as
// frames on a shared-memory segment's socket (Ring).
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
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "proto/ps.grpc.pb.h"
#include "server/byte_budget.h"
#include "server/chunk_requests.h"
#include "server/parked_calls.h"
#include "server/ps_call.h"
#include "server/row_requests.h"
#include "server/shard.h"
#include "server/shm_registry.h"

namespace pstrain {

using PsServiceBase = ParameterServer::WithRawMethod_Push<
    ParameterServer::WithRawMethod_Pull<ParameterServer::WithRawMethod_Status<
        ParameterServer::WithRawMethod_OpenShm<ParameterServer::WithRawMethod_PullRows<
            ParameterServer::WithRawMethod_PushRows<ParameterServer::WithRawMethod_ReadState<
                ParameterServer::WithRawMethod_WriteState<ParameterServer::WithRawMethod_Replicate<
                    ParameterServer::WithRawMethod_OfferViews<ParameterServer::WithRawMethod_HandOver<
                        ParameterServer::Service>>>>>>>>>>>;

class PsService final : public PsServiceBase {
 public:
  PsService();
  // Stops the shared-memory registry's thread first: it calls into the
  // service.
  ~PsService() override;

  // Makes the service answer pushes and pulls, of chunks and rows, from
  // `shard` (a job of `total_clocks` clocks; its chunks laid out in a
  // worker's segment as `shm_layout`: ShmLayout::OfServer; its chunks
  // placed by the job's placement `placement_version`, 0 the initial one);
  // until then they get UNAVAILABLE. Called again for a shard placed anew
  // (a move's switch): calls under way finish on the old one.
  void SetShard(std::shared_ptr<Shard> shard, int64_t total_clocks, ShmLayout shm_layout,
                int64_t placement_version = 0);
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
  void CancelParked(const absl::Status& status,
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
  // Pushes and pulls refused as malformed (INVALID_ARGUMENT) so far: the
  // Status' refused["chunks"] (common/refused.h).
  int64_t refused() const { return refused_.load(std::memory_order_relaxed); }
  // Standby copies: the scheduler's routes (who serves which chunks),
  // which Replicate checks its senders against.
  void SetRoutes(const ServerRoutes& routes);
  // Answers the parked pushes whose standby now holds what they took (or
  // whose chunks are no longer served here: UNAVAILABLE, retried at their
  // new primary).
  void WakePushes();
  // What the server's standby copies count (bytes sent to standbys).
  RequestCounters& counters() { return counters_; }
  // Answers the parked pulls (of chunks and of rows) whose guarantee now
  // holds (after the store applied updates on its own, e.g. a globally
  // clipped BSP round, or a dead worker was left out).
  void WakePulls();

 private:
  // Asks for the next call of `method` on `cq` (unless stopping).
  void Accept(PsCall::Method method, grpc::ServerCompletionQueue* cq);
  void Handle(PsCall* call);
  // Sends `st` (and the reply, if OK) unless the call ended meanwhile, drops
  // the handling reference; counts an INVALID_ARGUMENT among refused["chunks"].
  void Conclude(PsCall* call, const absl::Status& st);
  // Handle's parts: a PullRows or PushRows; a push or pull of chunks (a
  // pull answered, or parked until its read guarantee holds).
  void HandleRows(RowRequests& rows, PsCall* call);
  // A PushRows: answered, or with standby copies parked until the
  // standby holds it.
  void HandleRowPush(RowRequests& rows, PsCall* call);
  void HandlePush(ChunkRequests& chunks, PsCall* call);
  // HandlePush's end for a push taken or refused with `st`.
  void FinishPush(ChunkRequests& chunks, PsCall* call, const absl::Status& st);
  void HandlePull(ChunkRequests& chunks, PsCall* call);
  // Answers the parked pulls of chunks, or of rows, whose guarantee now holds.
  void WakeChunkPulls(ChunkRequests& chunks);
  void WakeRowPulls(RowRequests& rows);
  // A push or pull that came as a frame on a segment's socket: handled like
  // a call, answered through `bell`.
  void Ring(std::shared_ptr<ShmBell> bell, ShmFrame frame);
  // Whether a parked push may be answered now, and its answer.
  static bool PushReady(const ChunkRequests& chunks, const PsCall& call);
  static absl::Status PushAnswer(const ChunkRequests& chunks, const PsCall& call);
  static bool RowPushReady(const RowRequests& rows, const PsCall& call);
  static absl::Status RowPushAnswer(const RowRequests& rows, const PsCall& call);
  // Whether a pull of chunks may be answered now: its generation is not
  // the store's (it is refused), or its guarantee holds and its reply has
  // room (taken, then).
  bool ChunkPullReady(ChunkRequests& chunks, PsCall& call);
  // A call's reply left (or was never sent): its bytes are room again, for
  // the pulls waiting (the caller wakes them). False when it held none.
  bool GiveReplyRoom(PsCall* call);
  // What each parked pull waits for, into `st` (Status).
  void AddWaits(const ChunkRequests* chunks, MemberStatus* st) const;

  std::shared_ptr<ChunkRequests> chunks() const;
  std::shared_ptr<Shard> shard() const;
  // The server that serves home server `home`'s chunks, by the routes.
  int ServingOf(int home) const;
  std::shared_ptr<RowRequests> rows() const;

  const absl::Time start_;
  mutable absl::Mutex mu_;
  std::shared_ptr<Shard> shard_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<ChunkRequests> chunks_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<RowRequests> rows_ ABSL_GUARDED_BY(mu_);
  int id_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t placement_version_ ABSL_GUARDED_BY(mu_) = 0;
  std::string address_ ABSL_GUARDED_BY(mu_);
  MemberState state_ ABSL_GUARDED_BY(mu_) = REGISTERED;
  std::string message_ ABSL_GUARDED_BY(mu_);
  ServerRoutes routes_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<ShmRegistry> shm_;  // set before serving

  RequestCounters counters_;
  std::atomic<int64_t> refused_{0};
  ByteBudget replies_;  // pull replies built and not yet sent
  std::atomic<int64_t> push_window_{0};
  ParkedCalls parked_chunks_;      // each PsCall's `pull`
  ParkedCalls parked_rows_;        // each PsCall's `rows`
  ParkedCalls parked_pushes_;      // each PsCall's `taken`: waiting for the standby
  ParkedCalls parked_row_pushes_;  // each PsCall's `row_push`: the same
  // Each PsCall's `early`: pushes that came before the round they follow
  // was applied, their request kept (HandlePush).
  ParkedCalls early_pushes_;

  absl::Mutex accept_mu_;
  bool stopping_ ABSL_GUARDED_BY(accept_mu_) = false;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_PS_SERVICE_H_
