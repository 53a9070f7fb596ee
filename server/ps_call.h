// One call to the parameter server, of any method, from its acceptance to
// its end: what the service's threads, the parked pulls and the request
// families share. A gRPC call on the async API, or a push or pull that came
// as a frame on a shared-memory segment's socket (then answered through its
// bell).
//
// Lifetime: deleted when its last reference goes -- one while it is handled
// or parked, one for each tag gRPC has yet to deliver (done once accepted,
// finished once answered). Whoever wins Claim() -- the handler, a wake-up,
// or the done tag of a cancelled call -- decides its end; only a winner
// other than the done tag answers.
#ifndef PSTRAIN_SERVER_PS_CALL_H_
#define PSTRAIN_SERVER_PS_CALL_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "common/rpc.h"
#include "common/tensor_wire.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/async_unary_call.h"
#include "proto/ps.pb.h"
#include "server/chunk_requests.h"
#include "server/shm_registry.h"

namespace pstrain {

class PsCall {
 public:
  enum Method {
    kPush,
    kPull,
    kStatus,
    kOpenShm,
    kPullRows,
    kPushRows,
    kReadState,
    kWriteState,
    kReplicate,
    kOfferViews,
    kHandOver
  };
  enum Event { kAccepted, kFinished, kDone };
  struct Tag {
    PsCall* call;
    Event event;
  };

  explicit PsCall(Method m) : method(m), raw_responder(&ctx) {}
  // A push or pull that came as a frame on `b`'s connection, numbered `s`.
  PsCall(Method m, std::shared_ptr<ShmBell> b, uint64_t s)
      : method(m), bell(std::move(b)), seq(s), raw_responder(&ctx) {}

  void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
  bool Claim() { return !claimed_.exchange(true); }
  bool claimed() const { return claimed_.load(); }
  // A frame whose connection closed: its worker waits for no answer.
  bool abandoned() const { return bell != nullptr && bell->closed(); }

  // Sends the reply with `st` (the one place a server's answer becomes a
  // gRPC status). Only after winning Claim().
  void Answer(const absl::Status& st) {
    const grpc::Status status = ToGrpc(st);
    if (method == kPush) ProcessLatencies().push.Observe(absl::Now() - accepted_at);
    if (method == kPull) ProcessLatencies().pull.Observe(absl::Now() - accepted_at);
    if (bell != nullptr) {  // no finished tag: the frame is out
      std::string body;
      if (status.ok()) body = FlattenSmall(reply);
      bell->Reply(seq, status.error_code(), status.error_message(), body);
      return;
    }
    Ref();  // for the finished tag
    if (status.ok()) {
      raw_responder.Finish(reply, status, &finished);
    } else {
      raw_responder.FinishWithError(status, &finished);
    }
  }
  // Claim() and Answer() if won, then drops the handling reference.
  void Conclude(const absl::Status& status) {
    if (Claim()) Answer(status);
    Unref();
  }

  const Method method;
  const std::shared_ptr<ShmBell> bell;  // a frame's connection; null: a gRPC call
  const uint64_t seq = 0;               // a frame's
  int64_t reply_bytes = 0;              // counted against the reply limit until sent
  grpc::ServerContext ctx;
  grpc::ByteBuffer request, reply;  // every method is raw
  PullRequest pull;                 // a pull's parsed request
  PullRowsRequest rows;             // a PullRows's parsed request
  PushTaken taken;                  // what a push took (standby copies)
  PushTaken early;                  // an early push waiting (PsService::HandlePush)
  PushRowsRequest row_push;         // a PushRows's, taken (standby copies)
  absl::Time parked_at;             // a parked pull's
  absl::Time accepted_at;           // when gRPC handed the call over
  grpc::ServerAsyncResponseWriter<grpc::ByteBuffer> raw_responder;
  Tag accepted{this, kAccepted}, finished{this, kFinished}, done{this, kDone};

 private:
  std::atomic<int> refs_{1};
  std::atomic<bool> claimed_{false};
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_PS_CALL_H_
