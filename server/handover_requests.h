// A holder's side of ParameterServer.HandOver, below the gRPC glue
// (server/ps_service.h): the whole state of the chunks a move gives
// another server, and of one table's rows whose buckets it gives it, as
// they are once every update of the iterations before the move's switch
// clock is applied (the gate holds the workers there). The taker's side is
// server/move_intake.h.
#ifndef PSTRAIN_SERVER_HANDOVER_REQUESTS_H_
#define PSTRAIN_SERVER_HANDOVER_REQUESTS_H_

#include "absl/status/status.h"
#include "grpcpp/support/byte_buffer.h"
#include "server/shard.h"

namespace pstrain {

// The answer to HandOver `raw` from `shard` into *resp. INVALID_ARGUMENT
// for a malformed request or a chunk or table not held here;
// FAILED_PRECONDITION for an older generation or a chunk or table gone
// past the clock; UNAVAILABLE for a newer generation, or while a chunk or
// the table has not reached the clock (ask again).
absl::Status AnswerHandOver(const Shard& shard, const grpc::ByteBuffer& raw,
                            grpc::ByteBuffer* resp);

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_HANDOVER_REQUESTS_H_
