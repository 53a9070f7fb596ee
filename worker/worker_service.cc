#include "worker/worker_service.h"

#include "common/parked_call.h"
#include "common/security.h"

namespace pstrain {

grpc::ServerUnaryReactor* WorkerService::Status(grpc::CallbackServerContext* ctx,
                                                const StatusRequest* /*req*/, NodeStatus* resp) {
  if (const grpc::Status auth = Authenticate(*ctx); !auth.ok()) return FinishNow(ctx, auth);
  *resp = status_fn_();
  return FinishNow(ctx, grpc::Status::OK);
}

}  // namespace pstrain
