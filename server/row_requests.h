// The sparse tables' requests at a server (ParameterServer.PullRows,
// PushRows), below the gRPC glue (server/ps_service.h) and above the tables
// (server/sparse_tables.h): a pull parsed and checked before it waits for
// its read guarantee, and its reply built -- the rows in the slice they were
// pulled into, or encoded once into 16-bit values; a push's gradients read
// straight into place (common/row_wire.h) and handed to the tables.
// Refusals are the tables' to count (refused["rows"]). Parking and
// answering calls is the service's.
#ifndef PSTRAIN_SERVER_ROW_REQUESTS_H_
#define PSTRAIN_SERVER_ROW_REQUESTS_H_

#include <memory>

#include "grpcpp/grpcpp.h"
#include "proto/ps.pb.h"
#include "server/chunk_requests.h"
#include "server/sparse_tables.h"

namespace pstrain {

// Thread-safe, as the tables are.
class RowRequests {
 public:
  // `counters`, the server's, outlives the object.
  RowRequests(std::shared_ptr<SparseTables> tables, RequestCounters* counters);

  SparseTables& tables() const { return *tables_; }

  // Parses a PullRows into *req and checks it before it waits:
  // INVALID_ARGUMENT (counted) when malformed, the tables' refusals else.
  absl::Status CheckPull(const grpc::ByteBuffer& raw, PullRowsRequest* req) const;
  // Whether the pull may be answered now (its read guarantee holds, or it
  // would be refused: SparseTables::Readable).
  bool Readable(const PullRowsRequest& req) const;
  // The reply to a pull that may be answered.
  absl::Status FillPull(const PullRowsRequest& req, grpc::ByteBuffer* resp);
  // The answer to PushRows; a push taken leaves its request in *taken
  // (without its ids and gradients).
  absl::Status Push(const grpc::ByteBuffer& raw, grpc::ByteBuffer* resp, PushRowsRequest* taken);
  // Standby copies: whether the standby of the push's part holds it
  // (SparseTables::Replicated), and whether the part is still served here.
  bool PushReplicated(const PushRowsRequest& taken) const;
  bool PushServed(const PushRowsRequest& taken) const;

 private:
  const std::shared_ptr<SparseTables> tables_;
  RequestCounters* const counters_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_ROW_REQUESTS_H_
