// The worker's own gRPC service: Status.
#ifndef PSTRAIN_WORKER_WORKER_SERVICE_H_
#define PSTRAIN_WORKER_WORKER_SERVICE_H_

#include <functional>

#include "proto/worker.grpc.pb.h"

namespace pstrain {

class WorkerService final : public Worker::CallbackService {
 public:
  // `status_fn` is called from gRPC threads; it must be thread-safe.
  explicit WorkerService(std::function<NodeStatus()> status_fn)
      : status_fn_(std::move(status_fn)) {}

  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* ctx, const StatusRequest* req,
                                   NodeStatus* resp) override;

 private:
  std::function<NodeStatus()> status_fn_;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_WORKER_SERVICE_H_
