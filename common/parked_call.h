// Unary calls of the gRPC callback API whose reply waits for a condition.
// Used by the scheduler (scheduler/scheduler_service.h) for the calls the job
// holds: gate calls and BSP norm rounds. FinishNow serves any callback
// service. (A server's pulls that wait for their read guarantee are on the
// async API and park in server/ps_service.cc's own vector, not here.)
//
// A handler that cannot answer yet returns a ParkedReactor and keeps a
// Parked<What> where its owner guards it (the scheduler: one map keyed by
// ticket, under its mutex). Whoever wins Claim() -- the owner
// when the condition holds, or gRPC when the client cancels or its deadline
// passes -- fills the response and calls Finish exactly once. The reactor
// deletes itself in OnDone, which only follows Finish, so an entry that lost
// the claim is dropped without touching its reactor.
#ifndef PSTRAIN_COMMON_PARKED_CALL_H_
#define PSTRAIN_COMMON_PARKED_CALL_H_

#include <atomic>
#include <memory>
#include <utility>

#include "grpcpp/grpcpp.h"
#include "grpcpp/support/server_callback.h"

namespace pstrain {

class ParkedReactor : public grpc::ServerUnaryReactor {
 public:
  ParkedReactor() : claimed_(std::make_shared<std::atomic<bool>>(false)) {}

  const std::shared_ptr<std::atomic<bool>>& claim_flag() const { return claimed_; }

  void OnCancel() override {
    if (!claimed_->exchange(true)) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled while waiting"));
    }
  }
  void OnDone() override { delete this; }

 private:
  std::shared_ptr<std::atomic<bool>> claimed_;
};

// One parked call and what it waits for.
template <typename What>
struct Parked {
  Parked(ParkedReactor* r, What w)
      : reactor(r), claimed(r->claim_flag()), what(std::move(w)) {}

  // True for exactly one caller; only that caller may use `reactor` (and the
  // response pointer inside `what`), and it must Finish.
  bool Claim() { return !claimed->exchange(true); }
  // True once the call was answered or cancelled: drop the entry.
  bool Gone() const { return claimed->load(); }

  ParkedReactor* reactor;
  std::shared_ptr<std::atomic<bool>> claimed;
  What what;
};

// Answers a callback-API call at once.
inline grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* ctx,
                                           const grpc::Status& status) {
  grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
  r->Finish(status);
  return r;
}

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_PARKED_CALL_H_
