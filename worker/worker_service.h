// The worker's own gRPC service: Status.
#ifndef PSTRAIN_WORKER_WORKER_SERVICE_H_
#define PSTRAIN_WORKER_WORKER_SERVICE_H_

#include <functional>

#include "proto/worker.grpc.pb.h"

namespace pstrain {

// Status is a raw method: bytes that are not a StatusRequest get
// INVALID_ARGUMENT (gRPC's own parsing would answer INTERNAL or
// UNIMPLEMENTED). (On Worker::Service, not CallbackService: that has the
// typed Status, which the raw one would hide.)
class WorkerService final : public Worker::WithRawCallbackMethod_Status<Worker::Service> {
 public:
  // `status_fn` is called from gRPC threads; it must be thread-safe.
  explicit WorkerService(std::function<MemberStatus()> status_fn)
      : status_fn_(std::move(status_fn)) {}

  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* ctx,
                                   const grpc::ByteBuffer* req, grpc::ByteBuffer* resp) override;

 private:
  std::function<MemberStatus()> status_fn_;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_WORKER_SERVICE_H_
