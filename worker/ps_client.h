// The worker's client of the parameter servers: scatters a push over the
// servers that own each chunk and gathers a pull. Each server's chunks go in
// calls of about max_request_bytes (so a tensor of any size moves, far
// below gRPC's message limit), encoded for the path their server takes --
// its shared memory (worker/shm_links.h) or the messages -- and an attempt
// sends them all at once (worker/call_flight.h: gRPC calls or frames on the
// segments' sockets, each server's pushes within its window); failed calls
// are retried (common/retry.h).
#ifndef PSTRAIN_WORKER_PS_CLIENT_H_
#define PSTRAIN_WORKER_PS_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/partition.h"
#include "common/shm.h"
#include "common/tensor_wire.h"
#include "grpcpp/generic/generic_stub.h"
#include "proto/job.pb.h"
#include "proto/member.pb.h"
#include "worker/call_flight.h"
#include "worker/chunk_wire.h"
#include "worker/error_feedback.h"
#include "worker/held_views.h"
#include "worker/shm_links.h"

namespace pstrain {

// What a worker's pushes carry besides their gradients, from the
// scheduler's gate answers.
struct PushContext {
  int64_t checkpoint_clock = 0;  // PushRequest.checkpoint_clock
  // (first clock, apply at once) ascending: from which iterations a BSP
  // job's pushes are applied at once (PushRequest.apply_at_once; psctl
  // set-consistency). Empty: never.
  std::vector<std::pair<int64_t, bool>> at_once;
};

struct PsClientOptions {
  DType wire_dtype = FP32;      // of pushes and pulls
  int channels_per_server = 2;  // TCP connections to each server
  // Chunks are packed into calls of about this many bytes: a chunk joins a
  // call while the call stays within 1.25 times this (a larger chunk goes
  // alone), so a small chunk such as a bias rides with a large one.
  int64_t max_request_bytes = 1 << 20;
  // How long retryable failures are retried, with backoff.
  absl::Duration retry_window = absl::Seconds(30);
  // The cluster generation the requests are of (see PushRequest.generation).
  int64_t generation = 0;
  // Asked before each retry: true ends the call with ABORTED (the cluster
  // moved to a newer generation, so retrying this one's requests is pointless).
  std::function<bool()> abandon;
  // The parameters this worker trains: [first_param, end_param) of the
  // partition's (a pipeline stage's; end -1: to the last). Pulls and pushes
  // cover those only, and buffer i holds parameter first_param + i.
  int first_param = 0;
  int end_param = -1;
  // Move payloads through shared memory with the servers on this host
  // that grant it (common/shm_link.h); the others, and any server whose
  // segment goes missing, get them in the messages.
  bool shm = true;
  // With shm: an attempt whose calls all go to servers attached through
  // shared memory sends them as frames on the segments' sockets (the
  // doorbell, common/shm.h) instead of gRPC calls.
  bool shm_doorbell = true;
  // Tests (ps_worker --debug_hold_push): the push of this iteration waits
  // kHoldPush before it goes, so that a worker killed meanwhile never
  // sends it -- pushing layer by layer, the push of the first layer's
  // parameters only, the others go; -1: none. AsyncPsClient's.
  int64_t debug_hold_push = -1;
  // Tests (ps_worker --debug_delay_pull_param): every pull brings this
  // parameter (an index into the worker's) kDelayPull after the others, so
  // that a forward which does not wait for its layer's weights reads old
  // ones; -1: none. AsyncPsClient's.
  int debug_delay_pull_param = -1;
  // Standby copies (JobSpec.standby_copies): the servers' segments lay out
  // their standby copies too (ShmLayout::OfServer), and before each
  // attempt the calls go where `routes` (the scheduler's, as the worker
  // last heard them; null: every server serves its own chunks) say each
  // server's chunks are served now, at the servers' addresses there.
  int standby_copies = 0;
  std::function<ServerRoutes()> routes;
  // The hyperparameters a push of a clock carries (PushRequest.hyper,
  // serialized; "" for none): a PyTorch script's (worker/external). Unset:
  // none.
  std::function<std::string(int64_t clock)> hyper;
  // Compressed pushes (the job's JobSpec.compression, as the scheduler
  // completed it; codec NONE: dense): each chunk the codec compresses is
  // encoded with its residual in `feedback`, which outlives the client.
  // Initial values go dense.
  GradCompression compression;
  std::shared_ptr<ErrorFeedback> feedback;
  // Compressed pulls (compression.pulls; fp32 on the wire): the views this
  // worker holds, which outlive the client; null: dense pulls.
  std::shared_ptr<HeldViews> held_views;

  // These options as one generation's client takes them (the one place the
  // built-in and the PyTorch workers make them): `abandon` ends its waits;
  // `final_read` is the last read of the weights, which must be exact (fp32
  // on the wire, no held views); with the job's standby copies
  // (`job_standby_copies` > 0) its calls follow `routes`.
  PsClientOptions ForGeneration(int64_t generation_of, bool final_read,
                                std::function<bool()> abandon_when, int job_standby_copies,
                                std::function<ServerRoutes()> routes_now) const {
    PsClientOptions o = *this;
    o.generation = generation_of;
    o.abandon = std::move(abandon_when);
    if (final_read) {
      o.held_views = nullptr;
      o.wire_dtype = FP32;
    }
    o.standby_copies = job_standby_copies;
    if (job_standby_copies > 0) o.routes = std::move(routes_now);
    return o;
  }
};

inline constexpr absl::Duration kHoldPush = absl::Seconds(30);
inline constexpr absl::Duration kDelayPull = absl::Milliseconds(100);

// What a pull covers besides its clock, and who hears of its chunks.
struct PullScope {
  // Only these parameters' chunks (indices into the worker's parameters,
  // as PushParams's); null: every parameter.
  const std::vector<int>* params = nullptr;
  // Called on the pulling thread, once per parameter (an index into the
  // worker's), as soon as every chunk of it has been copied into its buffer.
  std::function<void(int param)> landed;
};

// Thread-compatible: one Push or Pull at a time.
class PsClient {
 public:
  // `partition` must outlive the client.
  PsClient(const ClusterMembers& cluster, const Partition* partition, int worker_id,
           PsClientOptions options = {});
  ~PsClient();

  // Reads every parameter for iteration `clock` under the read guarantee
  // `min_clock` into `weights` (one buffer per parameter, already sized).
  // *clocks (if not null) receives what they hold: per worker the
  // iterations applied in every chunk, and of this worker's own pushes
  // (PulledClocks). `scope` narrows the pull to some parameters and
  // reports each chunk that lands.
  absl::Status Pull(int64_t clock, int64_t min_clock, std::vector<std::vector<float>>* weights,
                    PulledClocks* clocks = nullptr, const PullScope& scope = {});
  // What pushes carry from now on besides their gradients. Any thread.
  void SetPushContext(PushContext context);
  // Sends iteration `clock`'s gradients (mean over `num_samples` samples;
  // `grad_norm` their L2 norm over every parameter, for clipping) and waits
  // until every server has taken them.
  // `absent`, per parameter (empty: none): no gradient this clock; `at`,
  // per parameter (empty: none): where its gradient lies instead of grads
  // (ParamClient::Push).
  absl::Status Push(int64_t clock, int num_samples, const std::vector<std::vector<float>>& grads,
                    float grad_norm = 0, const std::vector<bool>& absent = {},
                    const std::vector<const float*>& at = {});

  // Push of the gradients of parameters `params` only (indices into the
  // partition's parameters): a layer's share of iteration `clock`, sent as
  // soon as the backward has it. Every parameter must be pushed once per
  // iteration, by Push or by PushParams calls.
  absl::Status PushParams(int64_t clock, int num_samples,
                          const std::vector<std::vector<float>>& grads, float grad_norm,
                          const std::vector<int>& params, const std::vector<bool>& absent = {},
                          const std::vector<const float*>& at = {});

  // An EXTERNAL model's initial weights (fp32, one buffer per parameter)
  // to every server (PushRequest.initial_values): a chunk takes the first
  // it gets.
  absl::Status PushInitialValues(const std::vector<std::vector<float>>& weights);

  // Push and Pull at once: the pull is sent with the push, not after its
  // acknowledgement, and the server answers it once its read guarantee
  // holds (min_clock = clock + 1 reads this very push). One round trip
  // instead of two.
  absl::Status PushPull(int64_t clock, int num_samples,
                        const std::vector<std::vector<float>>& grads, float grad_norm,
                        int64_t pull_clock, int64_t min_clock,
                        std::vector<std::vector<float>>* weights,
                        PulledClocks* clocks = nullptr);

  // Payload bytes moved (in the wire dtype).
  int64_t bytes_in() const { return bytes_in_; }
  int64_t bytes_out() const { return bytes_out_; }
  // Calls issued to servers so far (retries included).
  int64_t rpcs() const { return rpcs_; }
  // Payload bytes that moved through shared memory (a share of bytes_in +
  // bytes_out), and the servers attached through it now.
  int64_t shm_bytes() const { return shm_bytes_; }
  int shm_segments() const { return links_.attached(); }
  // Calls that went as frames on a segment's socket (a share of rpcs()).
  int64_t shm_rings() const { return shm_rings_; }
  DType wire_dtype() const { return options_.wire_dtype; }

 private:
  using Call = ClientCall;
  absl::Mutex context_mu_;
  PushContext context_ ABSL_GUARDED_BY(context_mu_);
  // Whether this worker trains parameter `param` (see PsClientOptions).
  bool Trains(int param) const {
    return param >= options_.first_param && (options_.end_param < 0 || param < options_.end_param);
  }
  // What a pull's calls fill in.
  struct PullState {
    std::vector<PulledClocks> clocks;  // per call
    std::atomic<int64_t> bytes{0};
    std::deque<std::vector<int32_t>> batches;  // a scope's (addresses stay put)
    // PullScope::landed; with it, per parameter the chunks not yet in, and
    // per chunk of the partition whether it is in (a retry copies again).
    std::function<void(int)> landed;
    std::vector<int> missing;
    std::vector<bool> in;
  };
  // Runs the calls, retrying the failed ones (common/retry.h).
  absl::Status RunCalls(std::vector<Call>& calls);
  // One attempt at the calls not yet done; *only_waiting says whether its
  // only failures were calls that waited out their deadline at the server
  // (a pull for its read guarantee, a push for its round and its standby),
  // *progressed whether any call was done or waited.
  absl::Status Attempt(std::vector<Call>& calls, int* next_channel, bool* only_waiting,
                       bool* progressed);
  // Sends the calls `todo` to the servers that serve their chunks now
  // (PsClientOptions::routes), connecting to a server's new address.
  void Reroute(std::vector<Call>& calls, const std::vector<int>& todo);
  // Encodes a call for the path its server takes now (shared memory or
  // the message), unless it already is.
  void Prepare(Call& call);
  // Marks the calls `todo` that succeeded done; the attempt's status: the
  // first call's that may not be retried, else the first retryable one's,
  // else that pulls still wait (*only_waiting).
  static absl::Status Settle(std::vector<Call>& calls, const std::vector<absl::Status>& results,
                             const std::vector<int>& todo, bool pushes_wait, bool* only_waiting,
                             bool* progressed);
  void AddPullCalls(int64_t clock, int64_t min_clock, std::vector<std::vector<float>>* weights,
                    const std::vector<int>* params, PullState* state, std::vector<Call>* calls);
  void FinishPull(const PullState& state, PulledClocks* clocks);
  // A compressed pull's reply from server `s` for `batch` named the views
  // of chunks `unknown` as not kept there (a standby that took the chunks
  // over): gives it them whole (OfferViews), so that the change the retry
  // gets is the one the other server would have sent; UNAVAILABLE either
  // way (the call is retried), a refused view forgotten (then pulled
  // whole).
  absl::Status OfferViews(int s, const std::vector<int32_t>& batch,
                          const std::vector<uint64_t>& unknown);
  // Checks a pull reply from server `s` for `batch` and copies its payloads
  // (from the message, or from `link`'s pull region) into *weights; the
  // call's clocks go to state->clocks[index].
  absl::Status TakePullReply(int s, const std::vector<int32_t>& batch,
                             const grpc::ByteBuffer& reply, const ShmLink* link,
                             std::vector<std::vector<float>>* weights, PullState* state,
                             size_t index);
  // Returns the payload bytes of the push; with `params`, of those
  // parameters' chunks only; the chunks of parameters `absent` says have
  // no gradient go without one (PushHeader.without_gradient).
  int64_t AddPushCalls(const PushHeader& header, const std::vector<std::vector<float>>& grads,
                       std::vector<Call>* calls, const std::vector<int>* params = nullptr,
                       const std::vector<bool>* absent = nullptr,
                       const std::vector<const float*>* at = nullptr);
  // A push's header: iteration `clock`, the push context's fields.
  PushHeader Header(int64_t clock, int num_samples, float grad_norm);
  // The chunk batches of server `s` for `params` (null: every parameter's,
  // batches_[s]; else packed into *scoped, which keeps them).
  const std::vector<std::vector<int32_t>>& BatchesFor(
      int s, const std::vector<int>* params, std::vector<std::vector<int32_t>>* scoped) const;
  // Chunk batches of one server, about max_request_bytes of payload each.
  std::vector<std::vector<int32_t>> Pack(const std::vector<int32_t>& chunks) const;

  const Partition* partition_;
  const int worker_id_;
  const PsClientOptions options_;
  // [server][channel]
  std::vector<std::vector<std::unique_ptr<grpc::GenericStub>>> stubs_;
  // [server][batch]: chunk ids, about max_request_bytes of payload each.
  std::vector<std::vector<std::vector<int32_t>>> batches_;
  // [server]: bytes of pushes that may be under way at once, as the
  // server's last push response said (see PushResponse.window_bytes).
  std::vector<int64_t> push_window_;
  std::atomic<int64_t> bytes_in_{0}, bytes_out_{0}, rpcs_{0}, shm_bytes_{0}, shm_rings_{0};
  uint64_t next_seq_ = 0;  // the last frame's (ShmFrameHeader.seq)
  // Attempts made so far (PullRequest.shm_sequence).
  uint64_t attempts_ = 0;
  ShmLinks links_;  // the shared memory with the servers on this host
  // Standby copies: the servers' addresses, the server serving each
  // home server's chunks (empty: itself), the routes' version they are of.
  std::vector<std::string> addresses_;
  std::vector<int> serving_;
  int64_t routes_version_ = -1;
  const ChunkWire wire_;  // how the chunks' payloads are encoded and where they lie
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_PS_CLIENT_H_
