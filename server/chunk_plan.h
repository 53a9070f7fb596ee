// What each of a server's chunks is, fixed by the job spec, the partition
// and the optimizer: its name, shape, pipeline stage and the workers that
// push it, and the layout of its slab (weights, optimizer state, the BSP
// round's sum). ChunkStore keeps one per chunk beside its mutable state; an
// offloaded server sizes its memory budget from them. No I/O.
#ifndef PSTRAIN_SERVER_CHUNK_PLAN_H_
#define PSTRAIN_SERVER_CHUNK_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/partition.h"
#include "proto/job.pb.h"
#include "server/chunk_memory.h"
#include "server/memory_plan.h"
#include "server/optimizer.h"

namespace pstrain {

struct ChunkPlan {
  int32_t id = 0;
  // The server whose chunk it is by the partition: this one, or (standby
  // copies) the one whose standby this is.
  int home = 0;
  int stage = 0;  // the pipeline stage whose parameters it holds
  // The workers that push it: those of its stage (every worker without
  // pipeline stages).
  std::vector<bool> pushers;
  ChunkShape shape;   // whole rows of a matrix, else a vector
  SlabLayout layout;  // its weights, optimizer state (none for a buffer's) and round sum
  int32_t next = -1;  // this server's chunk after it, the first after the last (read ahead)
  std::string name;   // "<param>[<begin>:<end>]"
  // The parameter (an element of PlanChunks' `params`) and the offset of
  // the chunk's first element in it.
  const ParamInfo* param = nullptr;
  int64_t offset = 0;
};

// The plans of the chunks `server_id` holds (HeldChunks: its own, and with
// standby copies those it keeps standby copies of), in that order.
// `params` is ModelParams(job.model()); the plans point into it, so it
// outlives them.
std::vector<ChunkPlan> PlanChunks(const JobSpec& job, const std::vector<ParamInfo>& params,
                                  const Partition& partition, int server_id,
                                  const Optimizer& optimizer);

// What an offloaded store of these chunks needs of a budget (see
// server/memory_plan.h); `workers` is left to the caller.
ServerMemoryNeeds MemoryNeedsOf(const std::vector<ChunkPlan>& plans);

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_CHUNK_PLAN_H_
