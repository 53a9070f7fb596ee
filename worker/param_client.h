// The worker's parameter client, ps-lite style: Push and Pull queue an
// operation and return a ticket at once, Wait(ticket) waits for it. The
// clock loop (worker/clock_loop.h) uses this one interface whether it
// pushes layer by layer during the backward or the whole gradient after
// it, and whether it pulls at the top of a clock or prefetches the next
// clock's weights while this one computes; tests give it a fake.
#ifndef PSTRAIN_WORKER_PARAM_CLIENT_H_
#define PSTRAIN_WORKER_PARAM_CLIENT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "worker/ps_client.h"
#include "worker/serial_queue.h"
#include "worker/weight_arrivals.h"

namespace pstrain {

using ParamTicket = int64_t;
using ParamBuffers = std::vector<std::vector<float>>;

class ParamClient {
 public:
  virtual ~ParamClient() = default;
  // Reads every parameter for iteration `clock` under the read guarantee
  // `min_clock` into *into (sized), which must stay untouched until Wait;
  // *clocks (if not null; also untouched until Wait) receives what the
  // values hold: per worker the iterations whose updates every chunk
  // holds, and of this worker's own pushes (PulledClocks). With
  // `arrivals` the pull begins there at once and reports each chunk as it
  // lands, and its end (before Wait returns): the caller may read the
  // parameters that have landed before Wait.
  virtual ParamTicket Pull(int64_t clock, int64_t min_clock, ParamBuffers* into,
                           PulledClocks* clocks = nullptr,
                           WeightArrivals* arrivals = nullptr) = 0;
  // Sends iteration `clock`'s gradients of `params` (every parameter when
  // empty; each parameter once per iteration) from *grads, which must stay
  // unchanged until Wait; `norm` is the whole gradient's L2 norm (for
  // clipping; 0 when the push is by layers). `absent`, per parameter (as
  // grads; empty: none): it has no gradient this iteration (a PyTorch
  // parameter frozen, or whose .grad is None), so it is pushed as such
  // (PushRequest.without_gradient) and takes no update from this push.
  // `at`, per parameter (empty: none): where its gradient lies instead of
  // *grads (the caller's memory, unchanged until Wait); null: in *grads.
  virtual ParamTicket Push(int64_t clock, int num_samples, const ParamBuffers* grads, float norm,
                           std::vector<int> params, std::vector<bool> absent,
                           std::vector<const float*> at) = 0;
  // Sends an EXTERNAL model's initial weights from *weights (unchanged
  // until Wait) to the servers (PsClient::PushInitialValues).
  virtual ParamTicket PushInitialValues(const ParamBuffers* weights) = 0;
  // Waits for the operation; its status. Each ticket is waited for once.
  virtual absl::Status Wait(ParamTicket ticket) = 0;
  // Payload bytes moved so far (in the wire dtype).
  virtual int64_t bytes_in() const = 0;
  virtual int64_t bytes_out() const = 0;
  // Calls issued to the servers so far.
  virtual int64_t rpcs() const = 0;
  // Payload bytes that moved through shared memory (a share of the bytes
  // in and out), and the segments attached now (common/shm_link.h).
  virtual int64_t shm_bytes() const { return 0; }
  virtual int shm_segments() const { return 0; }
  // Calls that went as frames on a segment's socket (a share of rpcs()).
  virtual int64_t shm_rings() const { return 0; }
  // What pushes carry from now on besides their gradients (see PushContext).
  virtual void SetPushContext(PushContext context) {}
};

// ParamClient on PsClient: pulls run in order on one thread, pushes in
// order on another, so a prefetch and the pushes of the backward move at
// once. With standby copies a push is answered only once the standby
// holds it (its round closed and a round trip later): pushes then go on
// kStandbyLanes lanes by clock (odd, even) and by layer (the first
// parameter's index, modulo kLayerLanes), so that neither the next
// layer's push nor the next clock's waits behind an answer. Push, Pull and
// Wait from one thread.
class AsyncPsClient : public ParamClient {
 public:
  static constexpr int kLayerLanes = 3;
  static constexpr int kStandbyLanes = 2 * kLayerLanes;
  // `partition` must outlive the client.
  AsyncPsClient(const ClusterMembers& cluster, const Partition* partition, int worker_id,
                const PsClientOptions& options);
  // Waits for the operations under way (PsClientOptions::abandon cuts them
  // short); the queued ones are dropped.
  ~AsyncPsClient() override;

  ParamTicket Pull(int64_t clock, int64_t min_clock, ParamBuffers* into,
                   PulledClocks* clocks = nullptr,
                   WeightArrivals* arrivals = nullptr) override;
  ParamTicket Push(int64_t clock, int num_samples, const ParamBuffers* grads, float norm,
                   std::vector<int> params, std::vector<bool> absent,
                   std::vector<const float*> at) override;
  ParamTicket PushInitialValues(const ParamBuffers* weights) override;
  absl::Status Wait(ParamTicket ticket) override;
  int64_t bytes_in() const override;
  int64_t bytes_out() const override;
  int64_t rpcs() const override;
  int64_t shm_bytes() const override;
  int shm_segments() const override;
  int64_t shm_rings() const override;
  void SetPushContext(PushContext context) override;

 private:
  using Operation = std::function<absl::Status(PsClient&)>;
  // One PsClient and the queue that runs its operations in order.
  struct Lane {
    std::unique_ptr<PsClient> client;
    SerialQueue queue;
  };
  ParamTicket Queue(Lane& lane, Operation op);
  // A pull of every parameter but `delayed`, then, kDelayPull later, of
  // that one (PsClientOptions::debug_delay_pull_param).
  static absl::Status PullDelayingOne(PsClient& client, int64_t clock, int64_t min_clock,
                                      ParamBuffers* into, PulledClocks* clocks,
                                      int delayed, PullScope scope);

  absl::Mutex mu_;
  std::map<ParamTicket, absl::Status> done_ ABSL_GUARDED_BY(mu_);
  ParamTicket next_ticket_ ABSL_GUARDED_BY(mu_) = 0;
  const int64_t hold_push_;     // PsClientOptions::debug_hold_push
  const int delay_pull_param_;  // PsClientOptions::debug_delay_pull_param
  // The lane of a push of `clock`'s parameters `params` (see the class).
  Lane& PushLane(int64_t clock, const std::vector<int>& params);
  // A count of every lane's client summed.
  int64_t SumOverLanes(int64_t (PsClient::*count)() const) const;
  // Every lane, the pulls' first.
  std::vector<Lane*> Lanes();
  std::vector<const Lane*> Lanes() const;
  // Last: their threads end before done_ goes.
  Lane pulls_;
  std::vector<std::unique_ptr<Lane>> pushes_;  // by clock, modulo their number
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_PARAM_CLIENT_H_
