#include "worker/async_pusher.h"

#include <utility>

namespace pstrain {

AsyncPusher::AsyncPusher(std::unique_ptr<PsClient> client)
    : client_(std::move(client)), thread_([this] { Loop(); }) {}

AsyncPusher::~AsyncPusher() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void AsyncPusher::Begin(int64_t clock, int num_samples,
                        const std::vector<std::vector<float>>* grads) {
  absl::MutexLock lock(&mu_);
  clock_ = clock;
  num_samples_ = num_samples;
  grads_ = grads;
}

void AsyncPusher::Push(const std::vector<int>& params) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(params);
}

absl::Status AsyncPusher::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &AsyncPusher::Idle));
  return error_;
}

void AsyncPusher::Loop() {
  while (true) {
    std::vector<int> params;
    int64_t clock;
    int num_samples;
    const std::vector<std::vector<float>>* grads;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &AsyncPusher::HasWork));
      if (queue_.empty()) return;  // stopping
      params = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      clock = clock_;
      num_samples = num_samples_;
      grads = grads_;
    }
    // After an error the rest is dropped: Wait reports it.
    absl::Status st;
    bool failed;
    {
      absl::MutexLock lock(&mu_);
      failed = !error_.ok();
    }
    if (!failed) st = client_->PushParams(clock, num_samples, *grads, 0.0f, params);
    absl::MutexLock lock(&mu_);
    busy_ = false;
    if (!st.ok() && error_.ok()) error_ = st;
  }
}

}  // namespace pstrain
