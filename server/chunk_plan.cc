#include "server/chunk_plan.h"

#include <algorithm>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/stage_plan.h"

namespace pstrain {
namespace {

// The pipeline stage of each of the model's parameters (all 0 without stages).
std::vector<int> ParamStages(const JobSpec& job, int params) {
  std::vector<int> out(params, 0);
  const absl::StatusOr<std::vector<Stage>> plan =
      PlanStages(job.model(), std::max(1, job.pipeline_stages()));
  for (int s = 0; plan.ok() && s < static_cast<int>(plan->size()); ++s) {
    for (int p = (*plan)[s].first_param; p < (*plan)[s].end_param && p < params; ++p) out[p] = s;
  }
  return out;
}

// A chunk's shape: whole rows of a matrix, else a vector.
ChunkShape ShapeOf(const ParamInfo& param, const ChunkInfo& info) {
  ChunkShape shape;
  shape.cols = info.numel;
  if (param.shape.size() == 2 && info.offset % param.shape[1] == 0 &&
      info.numel % param.shape[1] == 0) {
    shape = ChunkShape{info.numel / param.shape[1], param.shape[1]};
  }
  return shape;
}

}  // namespace

std::vector<ChunkPlan> PlanChunks(const JobSpec& job, const std::vector<ParamInfo>& params,
                                  const Partition& partition, int server_id,
                                  const Optimizer& optimizer) {
  const std::vector<int> param_stage = ParamStages(job, static_cast<int>(params.size()));
  const int stages = std::max(1, job.pipeline_stages());
  const bool bsp = job.consistency() == BSP;
  const std::vector<int32_t> ids = HeldChunks(partition, server_id, job.standby_copies());
  std::vector<ChunkPlan> plans;
  for (size_t i = 0; i < ids.size(); ++i) {
    const ChunkInfo& info = partition.chunks()[ids[i]];
    const ParamInfo& param = params[info.param];
    ChunkPlan c;
    c.id = ids[i];
    c.home = info.server;
    c.stage = param_stage[info.param];
    for (int w = 0; w < job.num_workers(); ++w) c.pushers.push_back(StageOf(w, stages) == c.stage);
    c.shape = ShapeOf(param, info);
    // A buffer's values replace the chunk's: no optimizer state.
    const int64_t state = param.buffer != NOT_A_BUFFER ? 0 : optimizer.StateFloats(c.shape);
    c.layout = {c.id, info.numel, state, bsp ? info.numel : 0, kArrayGap};
    c.next = ids[(i + 1) % ids.size()];  // after the last, the next clock's first
    c.name = absl::StrCat(param.name, "[", info.offset, ":", info.offset + info.numel, "]");
    c.param = &param;
    c.offset = info.offset;
    plans.push_back(std::move(c));
  }
  return plans;
}

ServerMemoryNeeds MemoryNeedsOf(const std::vector<ChunkPlan>& plans) {
  ServerMemoryNeeds needs;
  for (const ChunkPlan& c : plans) {
    needs.largest_slab = std::max(needs.largest_slab, ChunkMemory::SlabBytes(c.layout));
    needs.largest_message =
        std::max(needs.largest_message, c.layout.weights * static_cast<int64_t>(sizeof(float)));
  }
  return needs;
}

}  // namespace pstrain
