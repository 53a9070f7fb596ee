// The stand-ins the clock loop runs for a model and a data set that live
// outside pstrain (a PyTorch script's): ExternalData hands out each
// clock's example indices in the job's order; HandedModel hands each
// clock's computation to the caller through a ClockExchange.
#ifndef PSTRAIN_WORKER_EXTERNAL_HANDED_MODEL_H_
#define PSTRAIN_WORKER_EXTERNAL_HANDED_MODEL_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/stage_plan.h"
#include "kernels/backend.h"
#include "proto/job.pb.h"
#include "worker/data/dataset.h"
#include "worker/data_source.h"
#include "worker/external/clock_exchange.h"
#include "worker/models/model.h"
#include "worker/param_client.h"

namespace pstrain {

// The data order of a job whose examples are its workers' (EXTERNAL_DATA):
// the examples of each clock's global batch, from the job's seed, its
// training set's size (data.train_size), batch_size and clocks per epoch
// (common/job_spec.h). The workers' (ExternalData) and pst_batch_indices'.
BatchSampler ExternalDataOrder(const JobSpec& job);

// The clock's examples: this worker's share of the global batch in the
// job's data order, as indices into the caller's data set.
class ExternalData : public DataSource {
 public:
  explicit ExternalData(const JobSpec& job) : sampler_(ExternalDataOrder(job)) {}

  void NextBatch(int64_t clock, int num_shares, int share_index, Batch* batch) override {
    offer_ = {clock, sampler_.Indices(clock, num_shares, share_index), share_index, num_shares};
    batch->rows = static_cast<int>(offer_.indices.size());
  }
  // The caller evaluates its model itself (and reports the accuracy).
  absl::StatusOr<double> Evaluate(Model&) override { return -1.0; }
  int64_t Epoch(int64_t clock) const override { return sampler_.Epoch(clock); }

  // The clock's examples as the caller gets them.
  const ClockExchange::OfferedClock& offer() const { return offer_; }

 private:
  BatchSampler sampler_;
  ClockExchange::OfferedClock offer_;
};

// The model as the clock loop sees it: its weights and gradients are host
// buffers the caller reads and writes; a clock's computation is the caller's, through the
// exchange. No device arrays (windowed: allocated on demand, never here).
//
// `by_layer`: the caller reads each parameter's weights once AwaitWeightsOf
// said they are in (a script's forward, module by module), so a clock is
// offered while its weights still arrive (where the loop pulls layer by
// layer: BSP with overlap, worker/weight_arrivals.h). Otherwise, and for
// the run's first clock 0 (whose weights are kept as the initial ones),
// the clock is offered once every weight is in. Either way a gradient
// leaves only once every weight is in (a push follows its read), and none
// in a clock whose pull failed (the loop redoes the clock).
class HandedModel : public Model {
 public:
  HandedModel(const ModelSpec& spec, kernels::Backend* backend, const ExternalData* data,
              ClockExchange* exchange, ParamBuffers* initial, bool by_layer)
      : Model(spec, WholeModel(spec), backend, /*windowed=*/true),
        data_(data),
        exchange_(exchange),
        initial_(initial),
        by_layer_(by_layer) {
    // The caller's CPU tensors may be views of weights(): a pull writes the
    // other set (Model::FlipWeights).
    KeepTwoWeightSets();
  }

  // The caller's thread, during a clock: waits until parameter `param`'s
  // weights are in weights(); OK at once once they are (or when the clock
  // was offered with all of them), else the pull's error (the clock is then
  // lost: its gradients do not leave, and the loop offers it again).
  // FAILED_PRECONDITION outside a clock (and once the clock ended, e.g.
  // the loop stopping: its weights may be half written).
  absl::Status AwaitWeightsOf(int param);

  absl::StatusOr<StepResult> Forward(int, const Batch&, const std::vector<float>*,
                                     std::vector<float>*, bool train) override;
  absl::Status Backward(int, const std::vector<float>*, std::vector<float>*) override {
    return absl::OkStatus();  // (the caller computed the gradients)
  }

 private:
  // Waits for the weights of `params` through the loop's WeightsAwait (none
  // outside a clock); the clock's first error is kept in read_.
  absl::Status AwaitRead(const std::vector<int>& params);

  const ExternalData* const data_;
  ClockExchange* const exchange_;
  ParamBuffers* const initial_;
  const bool by_layer_;
  absl::Mutex mu_;
  // During a clock (Forward's RunClock): the loop's wait for weights, the
  // waits under way (Forward ends the clock once none is), the clock's
  // first failed read.
  bool in_clock_ ABSL_GUARDED_BY(mu_) = false;
  WeightsAwait clock_await_ ABSL_GUARDED_BY(mu_);
  int awaiting_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status read_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_EXTERNAL_HANDED_MODEL_H_
