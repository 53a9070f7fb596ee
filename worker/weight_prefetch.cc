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
  if (backend_ == nullptr) return;
  // Whatever buffers this holds now (Take swaps them with a model's).
  for (std::vector<float>& b : buffers_) backend_->UnpinHost(b.data());
}

void WeightPrefetch::Start(ParamClient* client, int64_t clock, int64_t min_clock) {
  Drop(client);
  started_ = true;
  clock_ = clock;
  ticket_ = client->Pull(clock, min_clock, &buffers_, &clocks_);
}

absl::Status WeightPrefetch::Take(ParamClient* client, int64_t clock, ParamBuffers* weights,
                                  PulledClocks* clocks) {
  if (!Has(clock)) return absl::InternalError("no prefetch of this clock");
  started_ = false;
  const absl::Status st = client->Wait(ticket_);
  if (!st.ok()) return st;
  std::swap(*weights, buffers_);
  *clocks = clocks_;
  return absl::OkStatus();
}

void WeightPrefetch::Drop(ParamClient* client) {
  if (!started_) return;
  started_ = false;
  (void)client->Wait(ticket_);
}

}  // namespace pstrain
