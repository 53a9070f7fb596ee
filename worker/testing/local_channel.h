// In-process StageChannels for tests and benchmarks: a link between two
// neighbouring stages is two LocalQueues, one per direction, and each end a
// LocalEnd (sends into one, receives from the other).
#ifndef PSTRAIN_WORKER_TESTING_LOCAL_CHANNEL_H_
#define PSTRAIN_WORKER_TESTING_LOCAL_CHANNEL_H_

#include <deque>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "worker/stage_runner.h"

namespace pstrain {

// One direction of a link: a queue; Close() ends the waits.
class LocalQueue {
 public:
  void Put(StageTensor t) {
    absl::MutexLock lock(&mu_);
    items_.push_back(std::move(t));
  }
  absl::StatusOr<StageTensor> Take() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](LocalQueue* q)
             ABSL_SHARED_LOCKS_REQUIRED(q->mu_) { return q->closed_ || !q->items_.empty(); },
        this));
    if (items_.empty()) return absl::UnavailableError("the neighbour went away");
    StageTensor t = std::move(items_.front());
    items_.pop_front();
    return t;
  }
  void Close() {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }

 private:
  absl::Mutex mu_;
  std::deque<StageTensor> items_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

// One end of a link between stage s and s + 1.
class LocalEnd : public StageChannel {
 public:
  LocalEnd(LocalQueue* out, LocalQueue* in) : out_(out), in_(in) {}
  absl::Status Send(StageTensor t) override {
    sent_ += static_cast<int64_t>(t.values.size() * sizeof(float));
    out_->Put(std::move(t));
    return absl::OkStatus();
  }
  int64_t bytes_sent() const override { return sent_; }
  absl::StatusOr<StageTensor> Receive() override { return in_->Take(); }

 private:
  LocalQueue* out_;
  LocalQueue* in_;
  int64_t sent_ = 0;  // one sending thread
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_TESTING_LOCAL_CHANNEL_H_
