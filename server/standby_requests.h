// The standby's side of ParameterServer.Replicate, below the gRPC glue
// (server/ps_service.h): a primary's changes to the standby copies here,
// checked against the scheduler's routes -- its chunks' (each gradient in
// the message or in the segment the primary shares with this server)
// mirrored by the store (server/chunk_store_standby.cc), its table parts'
// by the tables (server/sparse_tables_standby.cc) -- and what the copies
// could not follow, for the primary to send whole. The primary's side is
// server/standby_sender.h.
#ifndef PSTRAIN_SERVER_STANDBY_REQUESTS_H_
#define PSTRAIN_SERVER_STANDBY_REQUESTS_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "grpcpp/support/byte_buffer.h"
#include "server/chunk_requests.h"
#include "server/sparse_tables.h"

namespace pstrain {

// The answer to Replicate `raw` into *resp. `serving(home)`: the server
// that serves home server `home`'s parts now, by the routes; `tables`: the
// server's (null: the request may carry none); `bell_segment`: the segment
// of the connection a frame came on (0: a gRPC call), the only one it may
// name. INVALID_ARGUMENT for a malformed request, FAILED_PRECONDITION for
// one from a server that does not serve what it names, the store's and the
// tables' refusals as they are.
absl::Status AnswerReplicate(const ChunkRequests& chunks, SparseTables* tables,
                             const grpc::ByteBuffer& raw, const std::function<int(int)>& serving,
                             grpc::ByteBuffer* resp, uint64_t bell_segment = 0);

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_STANDBY_REQUESTS_H_
