// The worker's client of the parameter servers: scatters a push over the
// servers that own each chunk and gathers a pull, one request per server, all
// servers in parallel.
#ifndef PSTRAIN_WORKER_PS_CLIENT_H_
#define PSTRAIN_WORKER_PS_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/partition.h"
#include "proto/cluster.pb.h"
#include "proto/ps.grpc.pb.h"

namespace pstrain {

// Thread-compatible: one Push or Pull at a time.
class PsClient {
 public:
  // `partition` must outlive the client.
  PsClient(const ClusterView& cluster, const Partition* partition, int worker_id,
           absl::Duration retry_window = absl::Seconds(30));

  // Reads every parameter for iteration `clock` under the read guarantee
  // `min_clock` into `weights` (one buffer per parameter, already sized).
  // *applied receives, per worker, the iterations applied in every chunk.
  absl::Status Pull(int64_t clock, int64_t min_clock, std::vector<std::vector<float>>* weights,
                    std::vector<int64_t>* applied = nullptr);
  // Sends iteration `clock`'s gradients (mean over `num_samples` samples)
  // and waits until every server has taken them.
  absl::Status Push(int64_t clock, int num_samples, const std::vector<std::vector<float>>& grads);

  int64_t bytes_in() const { return bytes_in_; }
  int64_t bytes_out() const { return bytes_out_; }

 private:
  // Runs call(server, attempt_done) for every server in parallel, retrying
  // retryable failures with backoff within the retry window.
  template <typename Request, typename Response>
  absl::Status CallAll(std::vector<Request>& requests, std::vector<Response>* responses,
                       bool is_pull);

  const Partition* partition_;
  const int worker_id_;
  const absl::Duration retry_window_;
  std::vector<std::unique_ptr<ParameterServer::Stub>> stubs_;
  std::atomic<int64_t> bytes_in_{0}, bytes_out_{0};
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_PS_CLIENT_H_
