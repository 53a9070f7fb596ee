// The worker's training loop. For each clock c:
//   gate (scheduler) -> pull with min_clock = c - s -> forward/backward on
//   this rank's slice of the global batch -> push tagged c
// then the final read of every update, the test-set evaluation, and an
// optional dump of the final weights. When the cluster rolls back to a
// checkpoint (a server failed), a gate answer of a newer generation, or a failed
// pull or push followed by such an answer, sends the loop back to the
// checkpoint's clock with clients of the new generation's servers.
#ifndef PSTRAIN_WORKER_TRAINER_H_
#define PSTRAIN_WORKER_TRAINER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/scheduler_client.h"
#include "kernels/backend.h"
#include "proto/cluster.pb.h"
#include "worker/dataset.h"
#include "worker/model.h"
#include "worker/ps_client.h"

namespace pstrain {

struct TrainerOptions {
  int worker_id = 0;
  JobSpec job;  // complete and valid
  // Sleeps this long in every iteration (tests of the consistency models).
  int debug_slowdown_ms = 0;
  // Writes the final weights as a binary pstrain.TensorSet here.
  std::string weights_out;
  // Evaluates on the test set at each generation's end (worker 0 only).
  bool eval_each_epoch = true;
  // A GPT recomputes its blocks' activations in the backward (--recompute).
  bool recompute = false;
  // fp16 compute (--compute_dtype=fp16): dynamic loss scaling.
  bool loss_scaling = false;
  // Push each layer's gradients as soon as the backward has them, on a
  // thread of their own (--overlap). Used when nothing needs the whole
  // gradient first: no accumulation, no fp16 loss scaling, no clipping by
  // the push's norm (SSP/ASP).
  bool overlap = false;
  // How gradients and weights travel (wire dtype, connections).
  PsClientOptions ps;
  // The cluster's generation and the clock to start at (from registration: past
  // 0 when the job resumes from a checkpoint).
  int64_t generation = 0;
  int64_t start_clock = 0;
};

// Run() on one thread; Status() from any.
class Trainer {
 public:
  Trainer(TrainerOptions options, SchedulerClient* scheduler, kernels::Backend* backend,
          TrainTest data);

  // Trains every clock of the job. Returns the final test accuracy (MLP) or
  // next-byte accuracy on the validation text (GPT, whose validation loss
  // goes to Status); all workers evaluate, worker 0 logs it. Stops early
  // with CANCELLED when `stop` becomes true.
  absl::StatusOr<double> Run(const std::atomic<bool>& stop);

  // This worker's status (clock, loss, throughput, bytes, accuracy).
  NodeStatus Status() const;

 private:
  absl::StatusOr<double> EvaluateTest(Model& model);
  // One clock's forward and backward: in job.accum_steps micro-batches, whose
  // mean gradient goes to *accumulated, when that is above 1.
  absl::StatusOr<StepResult> TrainStep(Model& model, const Batch& batch,
                                       std::vector<std::vector<float>>* accumulated);

  const TrainerOptions options_;
  SchedulerClient* scheduler_;
  kernels::Backend* backend_;
  const TrainTest data_;
  const absl::Time start_;
  // The cluster generation this worker trains in (read by its clients' abandon
  // check on their own threads).
  std::atomic<int64_t> generation_{0};

  mutable absl::Mutex mu_;
  int64_t clock_ ABSL_GUARDED_BY(mu_) = 0;
  double loss_ ABSL_GUARDED_BY(mu_) = 0;
  double samples_per_s_ ABSL_GUARDED_BY(mu_) = 0;
  double test_accuracy_ ABSL_GUARDED_BY(mu_) = -1;
  double validation_loss_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t peak_device_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  double unigram_entropy_ ABSL_GUARDED_BY(mu_) = 0;
  double loss_scale_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t skipped_steps_ ABSL_GUARDED_BY(mu_) = 0;
  double gate_ms_ ABSL_GUARDED_BY(mu_) = 0, pull_ms_ ABSL_GUARDED_BY(mu_) = 0;
  double compute_ms_ ABSL_GUARDED_BY(mu_) = 0, push_ms_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bytes_in_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bytes_out_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t pushes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t pulls_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_TRAINER_H_
