// A worker's pulls and pushes of sparse table rows (JobSpec.tables) by id:
// the ids are spread over the servers by the call's placement (OwnerOfRow,
// common/placement.h: the initial spread ServerOfRow until a move),
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
//
// The row path is part of the protocol as the dense one is (docs/failures.md):
// every request carries the cluster generation it is of, and a server
// refuses another generation's. A server that cannot be reached, or has not
// restored the call's generation yet, is tried again with backoff through
// common/retry.h -- at the address the servers' list gives at that attempt,
// so that a replacement's is found -- until the call succeeds, the retry
// window runs out, or the caller abandons it (the cluster rolled back past
// its generation, the job ended): only the servers that have not answered
// are asked again (a push taken twice changes nothing). Errors name the
// server and its address.
#ifndef PSTRAIN_WORKER_ROW_CLIENT_H_
#define PSTRAIN_WORKER_ROW_CLIENT_H_

#include <grpcpp/generic/generic_stub.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "proto/job.pb.h"
#include "proto/member.pb.h"
#include "proto/placement.pb.h"

namespace pstrain {

// What one row call is of, and when to give up on it.
struct RowCall {
  // The worker's iteration: a push is tagged with it; a pull's read
  // guarantee follows from it (TableMinClockForRead).
  int64_t clock = 0;
  // The cluster generation the call is of (PullRowsRequest.generation).
  int64_t generation = 0;
  // Which server holds each row in that generation: the placement once a
  // move changed it (version > 1), else the initial spread
  // (common/placement.h OwnerOfRow). A call goes to the servers it lists.
  Placement placement;
  // Asked before every retry and every 100 ms while the calls are under
  // way: a non-OK status ends the call with it, the calls under way
  // cancelled. Unset: never.
  std::function<absl::Status()> abandon;
};

struct RowClientOptions {
  // How long one attempt may wait at a server (a pull for its read
  // guarantee: waiting it out is asked again at once, not counted against
  // the retry window).
  absl::Duration call_timeout = absl::Seconds(60);
  // How long servers that cannot be reached (or have not restored the
  // call's generation) are retried: long enough for the scheduler to
  // declare one dead and a replacement to restore.
  absl::Duration retry_window = absl::Minutes(10);
};

// For each home server, the address of the server that serves its rows
// by `routes` (the scheduler's, with standby copies; without routes, or
// for a server they do not place, `servers`, the servers by id).
std::vector<std::string> HomeAddresses(const ServerRoutes& routes,
                                       std::vector<std::string> servers);

// Thread-compatible.
class RowClient {
 public:
  // `servers()` gives, for each home server in the order of their ids,
  // the address of the server that serves its rows (its own; with standby
  // copies where the routes say: HomeAddresses); it is asked before every
  // attempt. `job`'s tables.
  RowClient(const JobSpec& job, std::function<std::vector<std::string>()> servers, int worker_id,
            RowClientOptions options = {});

  // The rows of `ids` of `table` (ids.size() x width floats into *rows, in
  // order; an id may repeat), made on their servers if new. NOT_FOUND for
  // a table the job does not declare; a server's refusal as it gave it
  // (FAILED_PRECONDITION for an older generation: the cluster rolled back);
  // the abandon status once abandoned.
  absl::Status Pull(const std::string& table, const RowCall& call, absl::Span<const uint64_t> ids,
                    std::vector<float>* rows);
  // The worker's push of iteration call.clock to `table`, from
  // `num_samples` samples: `grads` holds ids.size() x width floats, one row
  // per entry of `ids` (a repeated id's rows are summed). Every server takes
  // it, those with none of its rows too (a BSP round waits for every
  // worker's push; SparseAdam's step counts every update) and applies its
  // part whole or refuses it; when one refuses, the others' parts stand
  // (they are not rolled back). One push per table and clock: a repeat is
  // taken as a retry and changes nothing.
  absl::Status Push(const std::string& table, const RowCall& call, int num_samples,
                    absl::Span<const uint64_t> ids, absl::Span<const float> grads);

  // Rows moved so far (each server's distinct rows per call), and
  // attempts made again.
  int64_t rows_pulled() const { return rows_pulled_; }
  int64_t rows_pushed() const { return rows_pushed_; }
  int64_t retries() const { return retries_; }

 private:
  // `table`'s width, or NOT_FOUND.
  absl::StatusOr<int> Width(const std::string& table) const;
  // Sends requests[s] to server s's `method` for every s with todo[s], all
  // at once, retrying (common/retry.h) the servers that failed; each reply
  // into (*replies)[s] as it comes, todo[s] cleared. `parks`: a pull that
  // may wait at the servers for its read guarantee. The first server's
  // error that stopped the retries, named.
  absl::Status CallAll(const char* method, const RowCall& call, bool parks,
                       const std::vector<grpc::ByteBuffer>& requests, std::vector<bool> todo,
                       std::vector<grpc::ByteBuffer>* replies);
  // One attempt at the servers still to do; *waited says whether every
  // failure was a call that waited out its deadline.
  absl::Status Attempt(const char* method, const RowCall& call,
                       const std::vector<grpc::ByteBuffer>& requests, std::vector<bool>* todo,
                       std::vector<grpc::ByteBuffer>* replies, bool* waited);
  // The stubs for the servers' addresses now (made anew for an address
  // that changed).
  void Resolve();
  // The job's servers (0 while their addresses are not known), resolved.
  int Servers();

  const JobSpec job_;
  const int worker_id_;
  const RowClientOptions options_;
  const std::function<std::vector<std::string>()> servers_;
  std::map<std::string, int> widths_;
  std::vector<std::string> addresses_;  // [server], as of the last Resolve
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs_;
  int64_t rows_pulled_ = 0, rows_pushed_ = 0, retries_ = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_ROW_CLIENT_H_
