// psctl's calls to the daemons: where a call goes and how long it waits,
// the two calls every verb makes of the scheduler, and how a failed call
// is told to the operator. Each call makes its own channel and context;
// the functions share no state (thread-safe).
#ifndef PSTRAIN_TOOLS_PSCTL_RPC_H_
#define PSTRAIN_TOOLS_PSCTL_RPC_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/cluster.pb.h"

namespace pstrain {

// A daemon psctl calls: its HOST:PORT and how long to wait for each answer
// (--timeout_s).
struct Endpoint {
  std::string address;
  absl::Duration timeout;
};

// Tells the operator on stderr that a call to `address` failed, with a
// hint for the usual causes (no daemon, TLS, the token): "psctl: ADDRESS:
// MESSAGE (HINT)". Returns 1, psctl's exit code for a failed call.
int FailCall(const std::string& address, const grpc::Status& status);

// The scheduler's ClusterStatus.
grpc::Status FetchStatus(const Endpoint& scheduler, ClusterStatus* status);

// Sends the scheduler an operator's request (ControlRequest: checkpoint,
// drain, stop, set-consistency); sets `clock` to the clock it answers (the
// checkpoint's, where the job stops, where the new mode starts).
grpc::Status AskControl(const Endpoint& scheduler, const ControlRequest& request, int64_t* clock);

}  // namespace pstrain

#endif  // PSTRAIN_TOOLS_PSCTL_RPC_H_
