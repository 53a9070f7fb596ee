// A worker's pulls and pushes of sparse table rows (JobSpec.tables) by id:
// the ids are spread over the servers by ServerOfRow (server/sparse_table.h),
// each server is asked once per call for its ids (deduplicated), and the
// rows come back in the caller's order. A push sums the gradients of a
// repeated id first (CoalesceRows) and sends each server its rows. The calls
// go to every server at once, the rows and gradients in slices of their
// own (common/row_wire.h: read into place, never copied into protobuf
// strings). Under the tables' consistency
// (TableConsistency: BSP or SSP) a pull for iteration `clock` waits at the
// servers until every live worker's pushes before its read guarantee are
// applied, and goes to every server, those with none of its ids too: a
// worker's next push then finds each server's round of the clock before
// closed.
#ifndef PSTRAIN_WORKER_ROW_CLIENT_H_
#define PSTRAIN_WORKER_ROW_CLIENT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "proto/job.pb.h"
#include <grpcpp/generic/generic_stub.h>

namespace pstrain {

// Thread-compatible.
class RowClient {
 public:
  // The servers' addresses in the order of their ids, `job`'s tables.
  RowClient(const JobSpec& job, const std::vector<std::string>& servers, int worker_id,
            absl::Duration timeout = absl::Seconds(30));

  // The rows of `ids` of `table` for iteration `clock` (ids.size() x width
  // floats into *rows, in order; an id may repeat), made on their servers
  // if new. NOT_FOUND for a table the job does not declare; a server's
  // refusal as it gave it.
  absl::Status Pull(const std::string& table, int64_t clock, absl::Span<const uint64_t> ids,
                    std::vector<float>* rows);
  // The worker's push of iteration `clock` to `table`, from `num_samples`
  // samples: `grads` holds ids.size() x width floats, one row per entry of
  // `ids` (a repeated id's rows are summed). Every server takes it, those
  // with none of its rows too (a BSP round waits for every worker's push;
  // SparseAdam's step counts every update) and applies its part whole or
  // refuses it; when one refuses, the others' parts stand (they are not
  // rolled back). One push per table and clock: a repeat is taken as a
  // retry and changes nothing.
  absl::Status Push(const std::string& table, int64_t clock, int num_samples,
                    absl::Span<const uint64_t> ids, absl::Span<const float> grads);

  // Rows moved so far (each server's distinct rows per call).
  int64_t rows_pulled() const { return rows_pulled_; }
  int64_t rows_pushed() const { return rows_pushed_; }

 private:
  // `table`'s width, or NOT_FOUND.
  absl::StatusOr<int> Width(const std::string& table) const;
  // Sends requests[s] to server s's `method` (those without ids only if
  // sent[s]), all at once, and waits for every reply into (*replies)[s];
  // the first server's error, named, if any.
  absl::Status CallAll(const char* method, const std::vector<grpc::ByteBuffer>& requests,
                       const std::vector<bool>& sent, std::vector<grpc::ByteBuffer>* replies);

  const JobSpec job_;
  const int worker_id_;
  const absl::Duration timeout_;
  std::map<std::string, int> widths_;
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs_;
  int64_t rows_pulled_ = 0, rows_pushed_ = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_ROW_CLIENT_H_
