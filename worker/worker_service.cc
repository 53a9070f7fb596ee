#include "worker/worker_service.h"

#include "common/parked_call.h"

namespace pstrain {

grpc::ServerUnaryReactor* WorkerService::Status(grpc::CallbackServerContext* ctx,
                                                const StatusRequest* /*req*/, NodeStatus* resp) {
  *resp = status_fn_();
  return FinishNow(ctx, grpc::Status::OK);
}

}  // namespace pstrain
