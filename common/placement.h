// The job's placement (proto/placement.proto): which server holds each
// chunk of the dense parameters and each bucket of the sparse tables'
// rows, and how it changes when a server is added to a running job or
// drained from it -- the placement after the change and every chunk and
// bucket that moves, planned so that no more moves than it takes to
// balance the servers' bytes. The scheduler decides; every daemon reads
// it. No I/O.
#ifndef PSTRAIN_COMMON_PLACEMENT_H_
#define PSTRAIN_COMMON_PLACEMENT_H_

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/params.h"
#include "common/partition.h"
#include "common/rows.h"
#include "proto/placement.pb.h"

namespace pstrain {

// The placement a job starts with (version 1): every chunk on the
// partition's server, bucket b on server b mod the partition's servers.
Placement InitialPlacement(const Partition& partition);
// INVALID_ARGUMENT naming the fault: no servers, servers not ascending or
// negative, a chunk count other than `num_chunks`, a bucket count other
// than kRowBuckets, a chunk or bucket on a server the placement does not
// list.
absl::Status CheckPlacement(const Placement& placement, int num_chunks);

// The job's chunks (Partition::Make's cut) placed as `placement` says,
// checked (CheckPlacement); a placement of version 1 or none (the
// scheduler sends one only once a move changed it) is the initial one,
// over `num_servers` servers.
absl::StatusOr<Partition> PlacedPartition(const std::vector<ParamInfo>& params, int64_t chunk_bytes,
                                          int num_servers, const Placement& placement);

int ServerOfChunk(const Placement& placement, int32_t chunk);
int ServerOfRow(const Placement& placement, uint64_t id);
// The server that holds row `id` of a job of `servers` initial servers:
// its bucket's by `placement` once a move changed it (version > 1), else
// the initial spread (ServerOfRow(id, servers), the same as the initial
// placement's). The one rule of every member.
int OwnerOfRow(const Placement& placement, int servers, uint64_t id);
// Whether server `server` is one of `placement`'s (version > 1), or of the
// initial `servers` ones: a row call goes to each such server.
bool TakesRows(const Placement& placement, int servers, int server);
// Chunk ids on server `server`, ascending.
std::vector<int32_t> ChunksOn(const Placement& placement, int server);
// The chunk ids server `server` gives away in a move from `from` (explicit)
// to `to`: on it under `from`, not under `to`; ascending. The other way
// round, those it takes (from a placement not explicit: every one it holds).
std::vector<int32_t> ChunksLeaving(const Placement& from, const Placement& to, int server);
// The smallest server id the placement does not list: a server added
// takes it (a drained server's id is free again).
int FreeServerId(const Placement& placement);

// What server `server` takes in a move from placement `from` to `to`
// (both explicit): by the server that holds it under `from`, the chunks
// `to` gives it, and the servers whose row buckets `to` gives it.
struct Handover {
  std::map<int, std::vector<int32_t>> chunks;  // [holder]: chunk ids, ascending
  std::set<int> rows;                          // holders of buckets it takes
  bool empty() const { return chunks.empty() && rows.empty(); }
};
Handover HandoverTo(const Placement& from, const Placement& to, int server);
// The servers that take anything in that move, ascending.
std::vector<int> Takers(const Placement& from, const Placement& to);

// What a server keeps per parameter element, and how much it may keep.
struct PlacementLimits {
  int64_t bytes_per_param = sizeof(float);  // weights and optimizer state
  std::map<int, int64_t> budget;  // [server]: the most chunk bytes it may hold (absent: no bound)
};

// One thing a change moves from server `from` to server `to`.
struct PlacementMove {
  enum class Kind { kChunk, kBucket };
  Kind kind = Kind::kChunk;
  int32_t id = 0;  // chunk id or bucket
  int from = 0;
  int to = 0;
  int64_t bytes = 0;  // a chunk's (PlacementLimits.bytes_per_param an element); a bucket's 0
};

// A planned change: the placement after it (the version after `now`'s) and
// what moves, the chunks largest first, then the buckets.
struct PlacementChange {
  Placement after;
  std::vector<PlacementMove> moves;
  int64_t MovedBytes() const;
};

// Server `server` joins: chunks move to it from the servers holding the
// most bytes until it holds about its share (each move leaves the pair it
// is between better balanced than before), and so do its share of the
// buckets, from the servers holding the most. FAILED_PRECONDITION when
// `server` is in the placement already or a server's budget breaks;
// INVALID_ARGUMENT for a placement that fails CheckPlacement.
absl::StatusOr<PlacementChange> PlanAdd(const Placement& now, const Partition& partition,
                                        int server, const PlacementLimits& limits);
// Server `server` leaves: its chunks, largest first, each to the server
// then holding the fewest bytes, and its buckets each to the one then
// holding the fewest buckets. FAILED_PRECONDITION when `server` is not in
// the placement, is its last server, or a server's budget breaks;
// INVALID_ARGUMENT as PlanAdd.
absl::StatusOr<PlacementChange> PlanDrain(const Placement& now, const Partition& partition,
                                          int server, const PlacementLimits& limits);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_PLACEMENT_H_
