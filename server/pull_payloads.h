// What a pull's reply carries for each chunk, one class an encoding: the
// weights in the pull's dtype (DensePayloads), or under compressed pulls
// the change from the worker's view in the job's codec (ViewPayloads,
// over server/pull_views.h). ChunkRequests::FillPull plans and writes
// through one, and puts the bytes where the pull's placement says: in the
// reply's message, or in the worker's shared-memory segment.
#ifndef PSTRAIN_SERVER_PULL_PAYLOADS_H_
#define PSTRAIN_SERVER_PULL_PAYLOADS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "common/pulled_clocks.h"
#include "common/tensor_wire.h"
#include "proto/ps.pb.h"
#include "server/chunk_store.h"
#include "server/pull_views.h"

namespace pstrain {

class PullPayloads {
 public:
  virtual ~PullPayloads() = default;

  // The payload bytes of each of the pull's chunks into *bytes; the chunks
  // it cannot answer yet (a view not kept here: the worker offers it
  // first) into unknown->views_unknown.
  virtual void Plan(std::vector<int64_t>* bytes, PullResponse* unknown) = 0;
  // Chunk i's payload as planned, written at `out` (any alignment); what
  // its weights hold into *clocks. An error only from the chunks' memory.
  virtual absl::Status Write(size_t i, char* out, PulledClocks* clocks) = 0;
  // The views the reply brings the worker to (null: a dense reply).
  virtual const PulledViews* views() const = 0;
};

// The payloads of `req` (checked, its guarantee holding) from `store`;
// `views`: the server's compressed pulls' views (null: none, and the
// pull names no held view). Both outlive the object.
std::unique_ptr<PullPayloads> PayloadsOf(const PullRequest& req, const ChunkStore& store,
                                         PullViews* views);

// Bytes of a chunk's dense payload in `dtype`.
int64_t DensePayloadBytes(const ChunkStore& store, int32_t chunk, DType dtype);

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_PULL_PAYLOADS_H_
