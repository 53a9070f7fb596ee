#include "worker/worker_service.h"

#include "common/parked_call.h"
#include "common/tensor_wire.h"

namespace pstrain {

grpc::ServerUnaryReactor* WorkerService::Status(grpc::CallbackServerContext* ctx,
                                                const grpc::ByteBuffer* req,
                                                grpc::ByteBuffer* resp) {
  StatusRequest request;
  if (!ParseSmall(*req, &request)) {
    return FinishNow(ctx, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                       "status: the request is not a StatusRequest"));
  }
  *resp = SerializeSmall(status_fn_());
  return FinishNow(ctx, grpc::Status::OK);
}

}  // namespace pstrain
