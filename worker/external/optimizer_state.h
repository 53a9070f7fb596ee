// A model's optimizer state read back from its servers (ParameterServer.
// ReadState), or given to them before the model's initial values
// (WriteState), per parameter: its updates so far and each of the
// optimizer's state arrays over the whole parameter (Adam: m and v). What
// pstrain.torch's Optimizer.state_dict() gives in torch.optim's layout.
#ifndef PSTRAIN_WORKER_EXTERNAL_OPTIMIZER_STATE_H_
#define PSTRAIN_WORKER_EXTERNAL_OPTIMIZER_STATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/partition.h"
#include "common/params.h"

namespace pstrain {

struct ParamState {
  // The optimizer's updates of the parameter: the fewest of its chunks'
  // (under BSP they are equal).
  int64_t steps = 0;
  std::vector<std::vector<float>> slots;  // each the parameter's numel
};

// Reads the state of every chunk of `params` (partitioned as `partition`)
// from the servers at `servers` (by id), of cluster generation
// `generation`: one call per server and about 16 MiB of state. A server
// not ready or not reachable is tried again with backoff for 30 s
// (common/retry.h); a refusal as it gave it, naming the server
// (UNIMPLEMENTED for an optimizer that is not elementwise,
// FAILED_PRECONDITION once the cluster rolled back).
absl::StatusOr<std::vector<ParamState>> ReadOptimizerState(
    const Partition& partition, const std::vector<ParamInfo>& params,
    const std::vector<std::string>& servers, int64_t generation);

// Gives the servers the state each chunk starts from (`state`, by
// parameter, partitioned as `partition`: a parameter without slots is skipped), before its initial
// values: a chunk that has them ignores it (ParameterServer.WriteState).
// Errors as ReadOptimizerState's.
absl::Status WriteOptimizerState(const Partition& partition,
                                 const std::vector<std::string>& servers, int64_t generation,
                                 const std::vector<ParamState>& state);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_EXTERNAL_OPTIMIZER_STATE_H_
