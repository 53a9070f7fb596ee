#include "worker/param_client.h"

#include <algorithm>
#include <utility>

#include "common/status_macros.h"

namespace pstrain {

AsyncPsClient::AsyncPsClient(const ClusterMembers& cluster, const Partition* partition,
                             int worker_id, const PsClientOptions& options)
    : hold_push_(options.debug_hold_push), delay_pull_param_(options.debug_delay_pull_param) {
  const int push_lanes = options.standby_copies > 0 ? kStandbyLanes : 1;
  for (int i = 0; i < push_lanes; ++i) pushes_.push_back(std::make_unique<Lane>());
  for (Lane* lane : Lanes()) {
    lane->client = std::make_unique<PsClient>(cluster, partition, worker_id, options);
  }
}

AsyncPsClient::~AsyncPsClient() {
  // Every lane at once: none starts another operation while another
  // finishes its own.
  for (Lane* lane : Lanes()) lane->queue.Stop();
}

AsyncPsClient::Lane& AsyncPsClient::PushLane(int64_t clock, const std::vector<int>& params) {
  if (pushes_.size() == 1) return *pushes_[0];
  const int layer = params.empty() ? 0 : params.front() % kLayerLanes;
  return *pushes_[(clock % 2) * kLayerLanes + layer];
}

std::vector<AsyncPsClient::Lane*> AsyncPsClient::Lanes() {
  std::vector<Lane*> out = {&pulls_};
  for (auto& lane : pushes_) out.push_back(lane.get());
  return out;
}

std::vector<const AsyncPsClient::Lane*> AsyncPsClient::Lanes() const {
  std::vector<const Lane*> out = {&pulls_};
  for (const auto& lane : pushes_) out.push_back(lane.get());
  return out;
}

ParamTicket AsyncPsClient::Queue(Lane& lane, Operation op) {
  ParamTicket ticket;
  {
    absl::MutexLock lock(&mu_);
    ticket = ++next_ticket_;
  }
  PsClient* client = lane.client.get();
  lane.queue.Run([this, ticket, client, op = std::move(op)] {
    const absl::Status st = op(*client);
    absl::MutexLock lock(&mu_);
    done_[ticket] = st;
  });
  return ticket;
}

ParamTicket AsyncPsClient::Pull(int64_t clock, int64_t min_clock, ParamBuffers* into,
                                PulledClocks* clocks, WeightArrivals* arrivals) {
  const int64_t number = arrivals != nullptr ? arrivals->Begin() : 0;
  const int delayed = delay_pull_param_ < static_cast<int>(into->size()) ? delay_pull_param_ : -1;
  return Queue(pulls_, [=](PsClient& client) {
    PullScope scope;
    if (arrivals != nullptr) {
      scope.landed = [arrivals, number](int param) { arrivals->Landed(number, param); };
    }
    absl::Status st;
    if (delayed < 0) {
      st = client.Pull(clock, min_clock, into, clocks, scope);
    } else {
      st = PullDelayingOne(client, clock, min_clock, into, clocks, delayed, scope);
    }
    if (arrivals != nullptr) arrivals->Finish(number, st);
    return st;
  });
}

absl::Status AsyncPsClient::PullDelayingOne(PsClient& client, int64_t clock, int64_t min_clock,
                                            ParamBuffers* into, PulledClocks* clocks,
                                            int delayed, PullScope scope) {
  std::vector<int> others;
  for (int p = 0; p < static_cast<int>(into->size()); ++p) {
    if (p != delayed) others.push_back(p);
  }
  const std::vector<int> last = {delayed};
  PulledClocks last_clocks;
  scope.params = &others;
  RETURN_IF_ERROR(client.Pull(clock, min_clock, into, clocks, scope));
  absl::SleepFor(kDelayPull);
  scope.params = &last;
  RETURN_IF_ERROR(client.Pull(clock, min_clock, into, &last_clocks, scope));
  if (clocks != nullptr) clocks->Merge(last_clocks);
  return absl::OkStatus();
}

ParamTicket AsyncPsClient::Push(int64_t clock, int num_samples, const ParamBuffers* grads,
                                float norm, std::vector<int> params, std::vector<bool> absent,
                                std::vector<const float*> at) {
  Lane& lane = PushLane(clock, params);
  return Queue(lane, [=, params = std::move(params), absent = std::move(absent),
                      at = std::move(at)](PsClient& client) {
    // Layer by layer, the push held is the one with parameter 0: the
    // backward's last, after the others have gone.
    const bool holds_first =
        params.empty() || std::find(params.begin(), params.end(), 0) != params.end();
    if (clock == hold_push_ && holds_first) absl::SleepFor(kHoldPush);
    return params.empty() ? client.Push(clock, num_samples, *grads, norm, absent, at)
                          : client.PushParams(clock, num_samples, *grads, norm, params, absent, at);
  });
}

ParamTicket AsyncPsClient::PushInitialValues(const ParamBuffers* weights) {
  return Queue(*pushes_[0],
               [weights](PsClient& client) { return client.PushInitialValues(*weights); });
}

absl::Status AsyncPsClient::Wait(ParamTicket ticket) {
  absl::MutexLock lock(&mu_);
  auto landed = [this, ticket]()
                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_.count(ticket) > 0; };
  mu_.Await(absl::Condition(&landed));
  const absl::Status st = done_[ticket];
  done_.erase(ticket);
  return st;
}

int64_t AsyncPsClient::SumOverLanes(int64_t (PsClient::*count)() const) const {
  int64_t n = 0;
  for (const Lane* lane : Lanes()) n += ((*lane->client).*count)();
  return n;
}

int64_t AsyncPsClient::bytes_in() const { return SumOverLanes(&PsClient::bytes_in); }
int64_t AsyncPsClient::bytes_out() const { return SumOverLanes(&PsClient::bytes_out); }
int64_t AsyncPsClient::shm_bytes() const { return SumOverLanes(&PsClient::shm_bytes); }
int64_t AsyncPsClient::shm_rings() const { return SumOverLanes(&PsClient::shm_rings); }
int64_t AsyncPsClient::rpcs() const { return SumOverLanes(&PsClient::rpcs); }

int AsyncPsClient::shm_segments() const {
  int n = 0;
  for (const Lane* lane : Lanes()) n += lane->client->shm_segments();
  return n;
}

void AsyncPsClient::SetPushContext(PushContext context) {
  for (auto& lane : pushes_) lane->client->SetPushContext(context);
}

}  // namespace pstrain
