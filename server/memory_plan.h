// How an offloaded server (ps_server --offload_dir --memory_budget) shares
// its budget among everything that grows with the job: the chunks' slabs
// resident (server/chunk_memory.h), the push requests the transport holds
// (gRPC's resource quota: read, not yet applied) and the pull replies built
// and not yet sent (PsService's reply limit). What is left -- code, gRPC's
// and the threads' own memory -- is a fixed overhead that does not grow
// with the model, the workers or the traffic. Knows nothing of gRPC.
#ifndef PSTRAIN_SERVER_MEMORY_PLAN_H_
#define PSTRAIN_SERVER_MEMORY_PLAN_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace pstrain {

struct ServerMemoryPlan {
  int64_t slabs = 0;     // chunk state resident
  int64_t requests = 0;  // push requests held by the transport
  int64_t replies = 0;   // pull replies built and not yet sent
  // Push requests each worker may have in flight at once: the requests'
  // share over the workers, at least one message (so with more workers than
  // the share holds messages, the requests take a message a worker).
  int64_t push_window = 0;
};

// The largest message is one chunk's fp32 payload: a request or reply holds
// at least one chunk, so each share holds one whatever the budget.
struct ServerMemoryNeeds {
  int64_t largest_slab = 0;     // bytes of the largest chunk's slab (mapped)
  int64_t largest_message = 0;  // bytes of the largest chunk's fp32 payload
  int workers = 1;              // pushing to this server
};

// The requests and the replies get an eighth of `budget` each (a quarter
// together, and at least one message each), the slabs the rest.
// INVALID_ARGUMENT, naming the least budget that works, when the slabs'
// share cannot hold the largest slab.
absl::StatusOr<ServerMemoryPlan> PlanServerMemory(int64_t budget, const ServerMemoryNeeds& needs);

// The least budget PlanServerMemory accepts.
int64_t MinimumServerBudget(const ServerMemoryNeeds& needs);

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_MEMORY_PLAN_H_
