// Pushes layers' gradients on a thread of its own while the backward goes
// on: the model reports a layer's gradients (Model::GradsReady), Push queues
// them, and the thread sends them with PsClient::PushParams in the order
// they came. Wait() before the next iteration reads the servers.
#ifndef PSTRAIN_WORKER_ASYNC_PUSHER_H_
#define PSTRAIN_WORKER_ASYNC_PUSHER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "worker/ps_client.h"

namespace pstrain {

// Begin, Push and Wait from one thread.
class AsyncPusher {
 public:
  explicit AsyncPusher(std::unique_ptr<PsClient> client);
  ~AsyncPusher();

  // Iteration `clock`'s pushes of `grads` (which must stay unchanged until
  // Wait returns) from `num_samples` samples.
  void Begin(int64_t clock, int num_samples, const std::vector<std::vector<float>>* grads);
  // Queues the push of `params`' gradients.
  void Push(const std::vector<int>& params);
  // Waits until every queued push is done; the first error of any (it stays).
  absl::Status Wait();
  int64_t bytes_out() const { return client_->bytes_out(); }

 private:
  void Loop();
  bool Idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queue_.empty() && !busy_; }
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty() || stop_; }

  std::unique_ptr<PsClient> client_;
  absl::Mutex mu_;
  std::deque<std::vector<int>> queue_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  int64_t clock_ ABSL_GUARDED_BY(mu_) = 0;
  int num_samples_ ABSL_GUARDED_BY(mu_) = 0;
  const std::vector<std::vector<float>>* grads_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::thread thread_;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_ASYNC_PUSHER_H_
