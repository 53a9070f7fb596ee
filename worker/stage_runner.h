// One pipeline stage's share of a clock: the replica's batch cut into
// micro-batches, run through this stage's layers in the order of the
// schedule (worker/pipeline_schedule.h), activations received from the
// stage before and sent to the next, their gradients the other way; the
// gradients of this stage's parameters summed over the micro-batches. No
// gRPC: the neighbours are StageChannels (gRPC streams in the daemon,
// in-process queues in tests).
#ifndef PSTRAIN_WORKER_STAGE_RUNNER_H_
#define PSTRAIN_WORKER_STAGE_RUNNER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/job.pb.h"
#include "worker/models/model.h"

namespace pstrain {

// One micro-batch's activations (forward) or their gradient (backward).
struct StageTensor {
  int64_t clock = 0;
  int micro = 0;
  std::vector<float> values;
};

// The link to one neighbouring stage, in both directions. Each direction
// delivers in the order sent.
class StageChannel {
 public:
  virtual ~StageChannel() = default;
  virtual absl::Status Send(StageTensor tensor) = 0;
  // The next tensor the neighbour sent; an error when the link broke (the
  // status names the neighbour) or the wait was cancelled.
  virtual absl::StatusOr<StageTensor> Receive() = 0;
  // Payload bytes sent so far (on the wire).
  virtual int64_t bytes_sent() const = 0;
};

// What one clock of a stage measured.
struct StageClock {
  StepResult result;      // the last stage's loss (mean) and predictions; else empty
  double busy_s = 0;      // in forwards and backwards
  double waiting_s = 0;   // for a neighbour's tensor (the bubble)
  int max_in_flight = 0;  // micro-batches whose activations were kept at once
  // Of waiting_s: for the stage before's activations, for the stage
  // after's gradients.
  double activation_wait_s = 0, gradient_wait_s = 0;
  // Payload bytes sent: activations to the stage after, gradients to the
  // stage before.
  int64_t activation_bytes_sent = 0, gradient_bytes_sent = 0;
};

class StageRunner {
 public:
  // `model` is this stage's (Model::stage()); `before` and `after` are the
  // neighbours (null for the first and the last stage). All outlive it.
  StageRunner(Model* model, PipelineSchedule schedule, int stage, int stages, StageChannel* before,
              StageChannel* after);

  // Runs clock `clock` on `batch` (the replica's share; every stage reads
  // the same) in `micro_batches` micro-batches; *grads receives the mean
  // gradient over the batch of this stage's parameters (each micro-batch's
  // weighted by its share of the rows). INVALID_ARGUMENT for a neighbour's
  // tensor of another clock or micro-batch, or of the wrong size.
  absl::StatusOr<StageClock> RunClock(int64_t clock, const Batch& batch, int micro_batches,
                                      std::vector<std::vector<float>>* grads);
  // A forward only, of evaluation batch `tag` (every stage evaluates the same
  // batches in the same order, tagged the same); the last stage's loss and
  // predictions, nothing on the others.
  absl::StatusOr<StepResult> Evaluate(int64_t tag, const Batch& batch);

 private:
  // The neighbour's next tensor, which must be of (clock, micro).
  absl::StatusOr<StageTensor> Expect(StageChannel* from, int64_t clock, int micro,
                                     StageClock* stats);
  absl::Status Forward(int64_t clock, const Batch& part, int micro, StageClock* stats);
  absl::Status Backward(int64_t clock, int micro, float share, StageClock* stats,
                        std::vector<std::vector<float>>* grads);

  Model* model_;
  const PipelineSchedule schedule_;
  const int stage_, stages_;
  StageChannel* before_;
  StageChannel* after_;
  std::vector<int> stash_of_;  // per micro-batch in flight: its activations' stash
  std::vector<bool> stash_used_;
  StepResult total_;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_STAGE_RUNNER_H_
