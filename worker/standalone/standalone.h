// A worker training alone (ps_worker --standalone): the same clock loop,
// model and kernels, with the servers' own chunk store and optimizer
// (server/chunk_store.h) in this process instead of over gRPC, and a gate
// that always opens. It is the ceiling bench/train_bench measures the
// cluster against ("what would one process do?"), and a debugging aid: a
// job that misbehaves alone is not the cluster's fault.
#ifndef PSTRAIN_WORKER_STANDALONE_H_
#define PSTRAIN_WORKER_STANDALONE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/partition.h"
#include "common/thread_pool.h"
#include "proto/job.pb.h"
#include "server/chunk_store.h"
#include "server/global_clipping.h"
#include "worker/clock_loop.h"
#include "worker/param_client.h"

namespace pstrain {

// The job as one worker and one server run it alone: INVALID_ARGUMENT for
// a job of pipeline stages (they need their neighbours).
absl::StatusOr<JobSpec> StandaloneJob(JobSpec job);

// One in-process server holding every chunk of a standalone job.
class StandaloneServer {
 public:
  // `job` from StandaloneJob; the optimizer splits large updates over
  // `threads` threads (0: the machine's cores).
  static absl::StatusOr<std::unique_ptr<StandaloneServer>> Make(const JobSpec& job, int threads);
  ~StandaloneServer();

  // A parameter client on this server (ParamClientFactory's product):
  // pushes apply on the calling thread, pulls wait for their read guarantee.
  std::unique_ptr<ParamClient> Client();

 private:
  friend class StandaloneParamClient;
  StandaloneServer(Partition partition, std::unique_ptr<ThreadPool> pool);
  // Waits until every chunk's read guarantee for `min_clock` holds (a
  // clipped BSP round is applied by the clipping thread).
  void AwaitReadable(int64_t min_clock);

  const Partition partition_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<ChunkStore> store_;
  absl::Mutex mu_;
  absl::CondVar applied_;  // a clipped BSP round was applied
  std::unique_ptr<GlobalClipping> clipping_;  // null unless the job clips under BSP
};

// The gate of a worker alone: every clock opens at once.
class StandaloneGate : public GateClient {
 public:
  absl::StatusOr<AdvanceClockResponse> AdvanceClock(const AdvanceClockRequest& req) override;
  int64_t generation() const override { return 0; }
  bool remote() const override { return false; }
  std::future<absl::StatusOr<AdvanceClockResponse>> AdvanceClockAsync(
      AdvanceClockRequest req) override;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_STANDALONE_H_
