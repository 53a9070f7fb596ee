// A model's optimizer state read back from its servers (ParameterServer.
// ReadState), or given to them before the model's initial values
// (WriteState), per parameter: its updates so far and each of the
// optimizer's state arrays over the whole parameter (Adam: m and v). What
// pstrain.torch's Optimizer.state_dict() gives in torch.optim's layout.
#ifndef PSTRAIN_WORKER_EXTERNAL_OPTIMIZER_STATE_H_
#define PSTRAIN_WORKER_EXTERNAL_OPTIMIZER_STATE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/partition.h"
#include "common/params.h"

namespace pstrain {

struct ParamState {
  // The optimizer's updates of the parameter: the fewest of its chunks'
  // (under BSP they are equal).
  int64_t steps = 0;
  std::vector<std::vector<float>> arrays;  // each the parameter's numel
};

// Where the state calls go and when they give up: the same routing path
// as the rows' (worker/row_client.h). `home_addresses()` gives, for each
// home server in the order of their ids, the address of the server that
// serves its chunks now (with standby copies, where the scheduler's routes
// say: HomeAddresses); it is asked before every attempt, so a promotion or
// a replacement's new address is followed. `generation` is the cluster
// generation the calls are of; `abandon` (unset: never) is asked before
// every retry and ends the call with its status.
struct StateCalls {
  std::function<std::vector<std::string>()> home_addresses;
  int64_t generation = 0;
  std::function<absl::Status()> abandon;
  // How long a server that cannot be reached, or is not ready yet (it has
  // not received the job's partition, or not restored the generation), is
  // tried again with backoff (common/retry.h).
  absl::Duration retry_window = absl::Seconds(30);
};

// Reads the state of every chunk of `params` (partitioned as `partition`)
// from the servers that serve them: one call per home server and about
// 16 MiB of state. UNAVAILABLE naming the home server's chunks and the
// address tried once the retries end; a refusal as the server gave it,
// named the same way (UNIMPLEMENTED for an optimizer that is not
// elementwise, FAILED_PRECONDITION once the cluster rolled back); the
// abandon status once abandoned.
absl::StatusOr<std::vector<ParamState>> ReadOptimizerState(const Partition& partition,
                                                           const std::vector<ParamInfo>& params,
                                                           const StateCalls& calls);

// Gives the servers the state each chunk starts from (`state`, by
// parameter, partitioned as `partition`: a parameter without arrays is
// skipped), before its initial values: a chunk that has them ignores it
// (ParameterServer.WriteState). Errors as ReadOptimizerState's.
absl::Status WriteOptimizerState(const Partition& partition, const StateCalls& calls,
                                 const std::vector<ParamState>& state);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_EXTERNAL_OPTIMIZER_STATE_H_
