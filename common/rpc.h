// gRPC helpers shared by all daemons: channels, servers, status conversion,
// retries with backoff.
#ifndef PSTRAIN_COMMON_RPC_H_
#define PSTRAIN_COMMON_RPC_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace pstrain {

// Largest message any pstrain daemon sends or accepts.
constexpr int kMaxMessageBytes = 256 << 20;

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address);
// A channel for bulk tensor traffic: a TCP connection of its own (channels
// made by separate calls never share one) with transport settings for large
// messages.
std::shared_ptr<grpc::Channel> MakeBulkChannel(const std::string& address);

struct ServerOptions {
  // Larger requests are refused (RESOURCE_EXHAUSTED) before they are read.
  int max_receive_bytes = kMaxMessageBytes;
  // Calls in flight at once on one client connection; more wait in the
  // client.
  int max_streams_per_client = 256;
  // The server-wide bound on request bytes the transport holds (read but
  // not yet handed over and answered): past it gRPC refuses streams with
  // RESOURCE_EXHAUSTED and closes connections instead of buffering. Null:
  // no bound. The daemon keeps it, and may Resize it once it knows its job.
  std::shared_ptr<grpc::ResourceQuota> quota;
  // With `queues`, `num_queues` completion queues for async services.
  int num_queues = 0;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>>* queues = nullptr;
};

// Builds and starts a server on `listen` ("HOST:PORT", port 0 lets the OS
// choose) with `services`. Returns the started server and sets *bound to
// "HOST:PORT" with the real port.
absl::StatusOr<std::unique_ptr<grpc::Server>> StartServer(
    const std::string& listen, const std::vector<grpc::Service*>& services, std::string* bound,
    const ServerOptions& options = {});

// Requests of the scheduler and the workers' status services are small.
constexpr int kMaxControlMessageBytes = 4 << 20;

absl::Status FromGrpc(const grpc::Status& status);
grpc::Status ToGrpc(const absl::Status& status);
// INVALID_ARGUMENT with `message`: a request's own fault.
grpc::Status InvalidArgument(const std::string& message);

// A client context with a deadline `timeout` from now.
std::unique_ptr<grpc::ClientContext> ContextWithTimeout(absl::Duration timeout);

// Exponential backoff: 100 ms doubling to 2 s, with ±20% jitter.
class Backoff {
 public:
  explicit Backoff(absl::Duration initial = absl::Milliseconds(100),
                   absl::Duration max = absl::Seconds(2));
  // The next delay to sleep.
  absl::Duration Next();

 private:
  absl::Duration next_;
  absl::Duration max_;
};

// True when the peer could not be reached or went away: UNAVAILABLE, or
// CANCELLED. pstrain's clients cancel their own calls only once they have
// given up (and then stop asking), so a CANCELLED a client sees came from
// the server ending the call: one shutting down or restarting (a scheduler
// stopped with its job kept in --state_dir, a rolling update). Retry both.
bool IsTransient(const absl::Status& status);

// True for the codes a caller should retry after a pause: transient ones,
// DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED and ABORTED.
bool IsRetryable(const absl::Status& status);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_RPC_H_
