#include "worker/weight_prefetch.h"

#include <utility>

namespace pstrain {

WeightPrefetch::WeightPrefetch(const std::vector<ParamInfo>& params, kernels::Backend* backend)
    : backend_(backend) {
  for (const ParamInfo& p : params) buffers_.push_back(kernels::PinnableVector(p.numel));
  if (backend_ == nullptr) return;
  for (std::vector<float>& b : buffers_) {
    backend_->PinHost(b.data(), static_cast<int64_t>(b.size() * sizeof(float)));
  }
}

WeightPrefetch::~WeightPrefetch() {
  Drop();
  if (backend_ == nullptr) return;
  // Whatever buffers this holds now (Take swaps them with a model's).
  for (std::vector<float>& b : buffers_) backend_->UnpinHost(b.data());
}

void WeightPrefetch::Start(int64_t clock, int64_t min_clock, Pull pull) {
  Drop();
  started_ = true;
  clock_ = clock;
  thread_ = std::thread([this, clock, min_clock, pull = std::move(pull)] {
    status_ = pull(clock, min_clock, &buffers_);
  });
}

absl::Status WeightPrefetch::Take(int64_t clock, Weights* weights) {
  if (!Has(clock)) return absl::InternalError("no prefetch of this clock");
  thread_.join();
  started_ = false;
  if (!status_.ok()) return status_;
  std::swap(*weights, buffers_);
  return absl::OkStatus();
}

void WeightPrefetch::Drop() {
  if (thread_.joinable()) thread_.join();
  started_ = false;
}

}  // namespace pstrain
