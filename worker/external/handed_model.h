// The stand-ins the clock loop runs for a model and a data set that live
// outside pstrain (a PyTorch script's): ExternalData hands out each
// clock's example indices in the job's order; HandedModel hands each
// clock's computation to the caller through a ClockExchange.
#ifndef PSTRAIN_WORKER_EXTERNAL_HANDED_MODEL_H_
#define PSTRAIN_WORKER_EXTERNAL_HANDED_MODEL_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
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

  void NextBatch(int64_t clock, int share_of, int share, Batch* batch) override {
    offer_ = {clock, sampler_.Indices(clock, share_of, share), share, share_of};
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
class HandedModel : public Model {
 public:
  HandedModel(const ModelSpec& spec, kernels::Backend* backend, const ExternalData* data,
              ClockExchange* exchange, ParamBuffers* initial)
      : Model(spec, WholeModel(spec), backend, /*windowed=*/true),
        data_(data),
        exchange_(exchange),
        initial_(initial) {}

  absl::StatusOr<StepResult> Forward(int, const Batch&, const std::vector<float>*,
                                     std::vector<float>*, bool train) override;
  absl::Status Backward(int, const std::vector<float>*, std::vector<float>*) override {
    return absl::OkStatus();  // (the caller computed the gradients)
  }

 private:
  const ExternalData* const data_;
  ClockExchange* const exchange_;
  ParamBuffers* const initial_;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_EXTERNAL_HANDED_MODEL_H_
