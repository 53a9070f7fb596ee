// A worker's training: its model, its data, the clock loop over the
// scheduler's gate and the servers (worker/clock_loop.h), the final
// evaluation and an optional dump of the final weights.
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
#include "proto/status.pb.h"
#include "worker/clock_loop.h"
#include "worker/data/dataset.h"
#include "worker/models/model.h"
#include "worker/ps_client.h"
#include "worker/stage_link.h"
#include "worker/stage_worker.h"
#include "worker/training_options.h"

namespace pstrain {

struct TrainerOptions {
  int worker_id = 0;
  JobSpec job;  // complete and valid
  // From the command line, settled by the runtime; the clock loop's, but
  // for an overlap the job or the memory plan rules out.
  TrainingOptions training;
  // How gradients and weights travel (wire dtype, connections).
  PsClientOptions ps;
  // The cluster's generation and the clock to start at (from registration: past
  // 0 when the job resumes from a checkpoint).
  int64_t generation = 0;
  int64_t start_clock = 0;
  // Pipeline stages: the daemon's service of the stream from the stage before.
  StageLinkService* stage_link = nullptr;
};

// Run() on one thread; Status() from any. The data source of its clock
// loop: the training set's batches in the data order, and the test set's
// (or the validation text's) evaluation.
class Trainer : private DataSource {
 public:
  // A null `scheduler`: the worker trains alone (worker/standalone/standalone.h).
  Trainer(TrainerOptions options, SchedulerClient* scheduler, kernels::Backend* backend,
          TrainTest data);

  // Trains every clock of the job (worker/clock_loop.h). Returns the final
  // test accuracy (MLP) or next-byte accuracy on the validation text (GPT,
  // whose validation loss goes to Status); all workers evaluate, worker 0
  // logs it. Stops early with CANCELLED when `stop` becomes true.
  absl::StatusOr<double> Run(const std::atomic<bool>& stop);

  // This worker's status (clock, loss, throughput, bytes, accuracy).
  MemberStatus Status() const;

  // While Run runs a pipeline stage, its waits on its links end unless it
  // links in `link_generation` already (its replica's pipeline restarts), or end
  // with `why` (StageWorker::Interrupt, Cancel); otherwise nothing. A stage
  // blocked on a neighbour sees no gate: the runtime's WorkerWatch
  // (worker/member_loop.h) calls these from its own thread. Thread-safe.
  void InterruptLinks(int64_t link_generation);
  void CancelLinks(const absl::Status& why);

 private:
  void NextBatch(int64_t clock, int num_shares, int share_index, Batch* batch) override;
  absl::StatusOr<double> Evaluate(Model& model) override;
  int64_t Epoch(int64_t clock) const override;
  // This worker's model: the whole model, or its pipeline stage's; under a
  // device memory budget, windowed as the plan (logged) says.
  // *split: each micro-batch run as that many (the plan's; 1 without one).
  absl::StatusOr<std::unique_ptr<Model>> MakeWorkerModel(int* split);
  // GPT: the corpus' unigram entropy (logged by worker 0, in Status).
  void NoteCorpus();
  // The clock loop's options: the job's micro-batches run as `split` each
  // (the memory plan's), overlap where the job allows it.
  ClockLoopOptions LoopOptions(int split) const;
  // Pipeline stages: the clock loop computes through *stage.
  void UsePipeline(StageWorker* stage, ClockLoopOptions* lo);
  // One evaluation batch: the model's, or through the pipeline.
  absl::StatusOr<StepResult> EvaluateBatch(Model& model, int64_t tag, const Batch& batch);
  // The final lines of the log and the --weights_out file.
  absl::Status Finish(const Model& model, const ClockLoop& loop, double accuracy);

  const TrainerOptions options_;
  SchedulerClient* scheduler_;
  kernels::Backend* backend_;
  const TrainTest data_;
  const absl::Time start_;
  BatchSampler sampler_;
  StageWorker* pipeline_ = nullptr;  // while Run runs a pipeline stage
  int eval_seqs_;                    // GPT: validation sequences evaluated at once

  mutable absl::Mutex mu_;
  const ClockLoop* loop_ ABSL_GUARDED_BY(mu_) = nullptr;  // while Run runs
  ClockMetrics last_ ABSL_GUARDED_BY(mu_);                // once it ended
  double validation_loss_ ABSL_GUARDED_BY(mu_) = -1;
  double unigram_entropy_ ABSL_GUARDED_BY(mu_) = 0;
  // Apart from mu_: a stage's calls may wait on its Connect, Status must not.
  absl::Mutex links_mu_;
  StageWorker* links_ ABSL_GUARDED_BY(links_mu_) = nullptr;  // while Run runs a stage
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_TRAINER_H_
