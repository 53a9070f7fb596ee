// A worker's clock loop over interfaces. For each clock c:
//
//   gate call (the scheduler) + pull (read guarantee min_clock = c - s)
//     -> forward/backward on this worker's share of the global batch
//     -> push tagged c
//
// The pull's read guarantee is what holds a clock back (under BSP the
// servers answer it once every live worker's push of c - 1 is applied);
// the gate's answer is taken at the next clock's start (ReadPlan::
// AwaitsGate), except by pipeline stages and a loop not yet connected.
//
// then the final read of every update and the evaluation. The gate, the
// parameter client and the data come through interfaces: the daemon's are
// the scheduler client and AsyncPsClient over gRPC; tests use in-process
// fakes. A gate answer of a newer generation (the cluster rolled back to a
// checkpoint), or a failed pull or push followed by one, sends the loop to
// the checkpoint's clock with clients of the new generation's servers.
//
// A pipeline stage whose clock fails on its links asks the gate to restart
// its replica's pipeline (--on_worker_failure=wait); the answer, like any
// gate answer of a newer link generation, sends the loop to the clock the
// replica restarts at, on new links.
//
// With overlap (TrainingOptions::overlap, when the job allows it) the
// gradients are pushed layer by layer as the backward makes them, under
// SSP and ASP the next clock's weights are pulled while this clock
// computes (worker/weight_prefetch.h), and under BSP the step starts while
// the clock's weights land, each layer's forward waiting for its own
// (worker/weight_arrivals.h); otherwise the whole gradient is pushed after
// the step. With overlap the pull goes out together with the
// gate call (the servers hold it until its read guarantee holds); without,
// once the pushes of the clock before last are acknowledged (and the gate
// opened, when the clock awaits it).
#ifndef PSTRAIN_WORKER_CLOCK_LOOP_H_
#define PSTRAIN_WORKER_CLOCK_LOOP_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/job_spec.h"
#include "kernels/backend.h"
#include "proto/gate.pb.h"
#include "proto/member.pb.h"
#include "proto/status.pb.h"
#include "worker/clock_metrics.h"
#include "worker/data_source.h"
#include "worker/gradient_accumulator.h"
#include "worker/loop_stats.h"
#include "worker/member_loop.h"
#include "worker/models/loss_scaler.h"
#include "worker/models/model.h"
#include "worker/param_client.h"
#include "worker/progress.h"
#include "worker/read_plan.h"
#include "worker/stage_runner.h"
#include "worker/training_options.h"
#include "worker/weight_arrivals.h"
#include "worker/weight_prefetch.h"

namespace pstrain {

// The gate, as the loop sees it.
class GateClient {
 public:
  virtual ~GateClient() = default;
  // Reports that req.worker_id finished req.clock - 1 and asks to start
  // req.clock (see AdvanceClockRequest).
  virtual absl::StatusOr<AdvanceClockResponse> AdvanceClock(const AdvanceClockRequest& req) = 0;
  // The same call, answered on a thread of its own (a fake may answer at
  // once).
  virtual std::future<absl::StatusOr<AdvanceClockResponse>> AdvanceClockAsync(
      AdvanceClockRequest req) {
    return std::async(std::launch::async, [this, req] { return AdvanceClock(req); });
  }
  // The newest generation the scheduler has told of (in heartbeats).
  virtual int64_t generation() const = 0;
  // False for a gate in this process (worker/standalone/standalone.h): its calls are
  // not counted as calls.
  virtual bool remote() const { return true; }
};

// The parameter client for the servers of `cluster` in `generation`;
// `fp32`: pulls of fp32 master weights whatever the wire dtype (the final
// read); `abandon` is asked before each retry (true ends the call).
using ParamClientFactory = std::function<std::unique_ptr<ParamClient>(
    const ClusterMembers& cluster, int64_t generation, bool fp32, std::function<bool()> abandon)>;

struct ClockLoopOptions {
  JobSpec job;  // complete and valid
  int worker_id = 0;
  int64_t start_clock = 0;
  int64_t generation = 0;
  // overlap: push by layers (and prefetch under SSP/ASP); loss scaling;
  // the evaluation at each epoch's end; the slowdown (training_options.h).
  TrainingOptions training;
  // Pipeline stages: this worker's replica (the data are split among the
  // live replicas; without stages every worker is its own replica) and the
  // stage's compute of a clock (worker/stage_runner.h), which writes the
  // mean gradient of the stage's parameters to *grads. Unset: the model
  // alone computes the clock.
  int stages = 1;
  int replica = 0;
  std::function<absl::StatusOr<StageClock>(int64_t clock, const Batch& batch, ParamBuffers* grads)>
      stage_step;
  // Called with every list of members the loop connects to and its replica's
  // link generation (a stage links to its neighbours there), and again when the
  // replica's pipeline restarted.
  std::function<absl::Status(const ClusterMembers& cluster, int64_t link_generation)> on_cluster;
  // An EXTERNAL model (worker/external): the initial values this worker
  // can push to the servers, or null when it has none. Asked for whenever
  // the loop connects at clock 0 (the start, or a rollback to it); the
  // servers keep the first and hold pulls until they have them. An error
  // (it could not give the servers what goes with them: the optimizer's
  // initial state) fails the connection.
  std::function<absl::StatusOr<const ParamBuffers*>()> initial_values;
};

// The loop's parts: WorkerMemberLoop takes the gate's answers (rollback,
// restart, drain, live workers), ReadPlan says where a clock's weights come
// from, GradientAccumulator sums micro-batches, LoopStats counts and
// Progress reports; the class keeps gate -> pull -> compute -> push.
class ClockLoop : private LoopActions {
 public:
  // Everything must outlive the loop; `backend` is the model's.
  ClockLoop(ClockLoopOptions options, GateClient* gate, ParamClientFactory params, DataSource* data,
            Model* model, kernels::Backend* backend);
  ~ClockLoop() override;

  // Trains every clock from the start clock; then the final read and the
  // evaluation, whose accuracy it returns. CANCELLED once `stop` is set.
  absl::StatusOr<double> Run(const std::atomic<bool>& stop);

  ClockMetrics metrics() const;

 private:
  // Gate and pull of clock_; false when the clock must start over (the
  // cluster rolled back, or a failed pull was followed by a rollback).
  absl::StatusOr<bool> GateAndPull();
  // Reads clock_'s weights from `source` (a pull sent with the gate is
  // `ticket`; a prefetch is of `pull_clock`) and notes them in the cache.
  // A layered pull (Layered()) is only noted as landing_: the step's
  // forward waits for each layer (worker/weight_arrivals.h).
  absl::Status Read(WeightSource source, std::optional<ParamTicket> ticket, int64_t pull_clock);
  // What a finished read tells: the pull counted, the iterations it holds.
  void NoteRead();
  // Waits for the layered pull under way, if any, and notes it.
  absl::Status FinishLanding();
  // Waits for the layered pull under way, if any, and forgets it (the loop
  // goes elsewhere).
  void DropLanding();
  // Whether a pull sent with the gate lands while the step computes: with
  // overlap, outside pipeline stages, past the clocks a replacement may
  // redo (their weights are checked whole before the step: RedoExactly).
  bool Layered() const;
  // A replacement redoing a clock its dead predecessor pushed, from weights
  // that already hold that push on some chunk while another lacks it
  // (PulledClocks::RedoIsInexact), under BSP: the push it makes would not
  // be the lost one. It asks the scheduler to roll the cluster back to its
  // last checkpoint instead (AdvanceClockRequest.redo_inexact): true when
  // the cluster rolled back (the loop goes on from there); false when the
  // clock goes on as read (no checkpoint to go back to, or nothing to
  // redo).
  absl::StatusOr<bool> RedoExactly();
  ParamTicket Pull(bool layered);
  // The step and its push; false when the clock must start over.
  absl::StatusOr<bool> ComputeAndPush();
  // One clock's forward and backward; in micro_batches micro-batches whose
  // mean gradient goes to accumulated_ when that is above 1.
  absl::StatusOr<StepResult> Compute();
  // Whether the clock's gradient is summed in accumulated_ (micro-batches,
  // pipeline stages) rather than left in the model's grads().
  bool Accumulates() const { return options_.stage_step || options_.job.micro_batches() > 1; }
  // Sends the clock's whole gradient (unless its layers went during the
  // backward). Its pushes are awaited two clocks on (GateAndPull), or one
  // when the clock's gradient is summed in accumulated_ (ComputeAndPush).
  void Push(bool finite);
  absl::Status AwaitPushes(std::vector<ParamTicket>* tickets);
  // The last clock's report, then the final read of every update; false
  // when the cluster rolled back meanwhile.
  absl::StatusOr<bool> FinalRead();
  // Takes a gate answer (WorkerMemberLoop::Adopt); true when it sent the
  // loop elsewhere.
  absl::StatusOr<bool> Adopt(const AdvanceClockResponse& gate);
  // Takes the answer of a gate call left pending (SSP, ASP: see
  // ReadPlan::AwaitsGate); true when it sent the loop elsewhere.
  absl::StatusOr<bool> TakePendingGate();
  // After a failed pull or push: did the cluster roll back? If not, the
  // failure stands.
  absl::Status Resync(const absl::Status& failure);
  // After a pipeline stage's clock failed on its links: its replica's
  // pipeline restarts (or the cluster rolled back) and the loop resumes
  // where the scheduler says. If neither, the failure stands.
  absl::Status RelinkAfter(const absl::Status& failure);
  absl::StatusOr<AdvanceClockResponse> CallGate(int64_t clock, bool relink = false);
  std::future<absl::StatusOr<AdvanceClockResponse>> CallGateAsync(int64_t clock);
  AdvanceClockRequest GateRequest(int64_t clock, bool relink);
  // Metrics, progress lines and the epoch's evaluation after clock_.
  absl::Status AfterClock(const StepResult& step);
  Traffic TrafficSoFar() const { return stats_.Total(params_.get()); }

  // LoopActions (WorkerMemberLoop's):
  void ResumeAt(int64_t clock) override;
  // Clients of the servers of `cluster` for the current generation.
  absl::Status Connect(const ClusterMembers& cluster) override;
  absl::Status Relink(const ClusterMembers& cluster, int64_t link_generation) override;
  void SetPushContext(const PushContext& context) override;

  const ClockLoopOptions options_;
  GateClient* const gate_;
  const ParamClientFactory make_params_;
  DataSource* const data_;
  Model* const model_;
  kernels::Backend* const backend_;
  const std::atomic<bool>* stop_ = nullptr;
  // Set when the loop ends: pulls in flight give up at their next retry.
  std::atomic<bool> leaving_{false};
  WorkerMemberLoop member_;  // generation, link generation, live workers, the job's end
  ReadPlan reads_;           // after member_: it reads its schedule
  LoopStats stats_;
  Progress progress_;  // after stats_

  int64_t clock_;
  // The iterations whose pushes every server acknowledged (told to the
  // gate: a replacement of this worker starts there).
  int64_t pushed_through_;
  ClusterMembers cluster_;  // the servers, from the last gate
  Batch batch_;
  GradientAccumulator accumulated_;
  LossScaler scaler_;
  std::vector<ParamTicket> push_tickets_;        // this clock's pushes
  std::vector<ParamTicket> older_push_tickets_;  // the last clock's
  // What the last read's weights hold (ParamClient::Pull).
  PulledClocks read_clocks_;
  // The clock a replacement redoes inexactly, the scheduler having no
  // checkpoint to roll back to (-1: none).
  int64_t inexact_redo_ = -1;
  // SSP, ASP: the gate call of the clock under way, answered while it runs.
  std::future<absl::StatusOr<AdvanceClockResponse>> pending_gate_;
  std::optional<WeightPrefetch> prefetch_;
  WeightArrivals arrivals_;              // the layered pull's parameters
  std::optional<ParamTicket> landing_;   // the layered pull under way
  std::unique_ptr<ParamClient> params_;  // after prefetch_: it ends first
  std::unique_ptr<ParamClient> final_params_;

  mutable absl::Mutex mu_;
  ClockMetrics metrics_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_CLOCK_LOOP_H_
