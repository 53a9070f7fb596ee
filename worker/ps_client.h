// The worker's client of the parameter servers: scatters a push over the
// servers that own each chunk and gathers a pull. Each server's chunks go in
// calls of about max_request_bytes (so a tensor of any size moves, far
// below gRPC's message limit), all calls in flight at once on the async API,
// spread over several connections per server -- except that the pushes
// under way at one server stay within the window its last push response
// gave (an offloaded server's share of its budget; one push at a time until
// a response says). The calling thread drains the calls' completion queue
// itself (no gRPC thread hands replies over).
#ifndef PSTRAIN_WORKER_PS_CLIENT_H_
#define PSTRAIN_WORKER_PS_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/partition.h"
#include "common/shm.h"
#include "common/tensor_wire.h"
#include "grpcpp/generic/generic_stub.h"
#include "proto/cluster.pb.h"
#include "proto/job.pb.h"

namespace pstrain {

class ShmLink;

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
  // that grant it (worker/shm_link.h); the others, and any server whose
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
};

inline constexpr absl::Duration kHoldPush = absl::Seconds(30);

// Thread-compatible: one Push or Pull at a time.
class PsClient {
 public:
  // `partition` must outlive the client.
  PsClient(const ClusterView& cluster, const Partition* partition, int worker_id,
           PsClientOptions options = {});
  ~PsClient();

  // Reads every parameter for iteration `clock` under the read guarantee
  // `min_clock` into `weights` (one buffer per parameter, already sized).
  // *applied receives, per worker, the iterations applied in every chunk.
  absl::Status Pull(int64_t clock, int64_t min_clock, std::vector<std::vector<float>>* weights,
                    std::vector<int64_t>* applied = nullptr);
  // What pushes carry from now on besides their gradients. Any thread.
  void SetPushContext(PushContext context);
  // Sends iteration `clock`'s gradients (mean over `num_samples` samples;
  // `grad_norm` their L2 norm over every parameter, for clipping) and waits
  // until every server has taken them.
  absl::Status Push(int64_t clock, int num_samples, const std::vector<std::vector<float>>& grads,
                    float grad_norm = 0);

  // Push of the gradients of parameters `params` only (indices into the
  // partition's parameters): a layer's share of iteration `clock`, sent as
  // soon as the backward has it. Every parameter must be pushed once per
  // iteration, by Push or by PushParams calls.
  absl::Status PushParams(int64_t clock, int num_samples,
                          const std::vector<std::vector<float>>& grads, float grad_norm,
                          const std::vector<int>& params);

  // An EXTERNAL model's initial weights (fp32, one buffer per parameter)
  // to every server (PushRequest.seed): a chunk takes the first seed it
  // gets.
  absl::Status Seed(const std::vector<std::vector<float>>& weights);

  // Push and Pull at once: the pull is sent with the push, not after its
  // acknowledgement, and the server answers it once its read guarantee
  // holds (min_clock = clock + 1 reads this very push). One round trip
  // instead of two.
  absl::Status PushPull(int64_t clock, int num_samples,
                        const std::vector<std::vector<float>>& grads, float grad_norm,
                        int64_t pull_clock, int64_t min_clock,
                        std::vector<std::vector<float>>* weights,
                        std::vector<int64_t>* applied = nullptr);

  // Payload bytes moved (in the wire dtype).
  int64_t bytes_in() const { return bytes_in_; }
  int64_t bytes_out() const { return bytes_out_; }
  // Calls issued to servers so far (retries included).
  int64_t rpcs() const { return rpcs_; }
  // Payload bytes that moved through shared memory (a share of bytes_in +
  // bytes_out), and the servers attached through it now.
  int64_t shm_bytes() const { return shm_bytes_; }
  int shm_segments() const { return shm_segments_; }
  // Calls that went as frames on a segment's socket (a share of rpcs()).
  int64_t shm_rings() const { return shm_rings_; }
  DType wire_dtype() const { return options_.wire_dtype; }

 private:
  struct Call;
  absl::Mutex context_mu_;
  PushContext context_ ABSL_GUARDED_BY(context_mu_);
  // Whether this worker trains parameter `param` (see PsClientOptions).
  bool Trains(int param) const {
    return param >= options_.first_param && (options_.end_param < 0 || param < options_.end_param);
  }
  // What a pull's calls fill in.
  struct PullState {
    std::vector<std::vector<int64_t>> applied;  // per call
    std::atomic<int64_t> bytes{0};
  };
  // Runs the calls, retrying the failed ones (common/retry.h).
  absl::Status RunCalls(std::vector<Call>& calls);
  // One attempt at the calls not yet done; *only_waiting says whether its
  // only failures were pulls that waited out their deadline.
  absl::Status Attempt(std::vector<Call>& calls, int* next_channel, bool* only_waiting);
  struct Flight;
  // Whether call i may start now (within the frames allowed under way: a
  // pull always; a push within its server's window, or alone); counts it
  // if so.
  bool Admit(Flight& flight, int i) const;
  // Encodes a call for the path its server takes now (shared memory or
  // the message), unless it already is.
  void Prepare(Call& call);
  // The shared memory with server `s`, attaching it on first use; null:
  // the messages carry the payloads.
  ShmLink* Link(int s);
  // Server `s` no longer knows the segment of `link` (it restarted): the
  // next calls carry their payloads until a new segment is attached.
  void LoseLink(int s, ShmLink* link);
  void Launch(Flight& flight, int i, int* next_channel);
  // Launch of a call that goes as a frame (flight.bell).
  void Ring(Flight& flight, int i);
  // Waits for an attempt's frames' answers (and launches the held pushes
  // as room frees); the gRPC calls' counterpart is the completion queue.
  void AwaitRings(Flight& flight, int* next_channel);
  // Ends the frames still under way on `link` (null: all) with `status`.
  void EndRings(Flight& flight, const ShmLink* link, const grpc::Status& status);
  void LaunchHeld(Flight& flight, int* next_channel);
  // Takes call i's reply (and a push's window from it).
  void Complete(Flight& flight, int i);
  // Marks the calls `todo` that succeeded done; the attempt's status: the
  // first call's that may not be retried, else the first retryable one's,
  // else that pulls still wait (*only_waiting).
  static absl::Status Settle(std::vector<Call>& calls, const std::vector<absl::Status>& results,
                             const std::vector<int>& todo, bool* only_waiting);
  void AddPullCalls(int64_t clock, int64_t min_clock, std::vector<std::vector<float>>* weights,
                    PullState* state, std::vector<Call>* calls);
  void FinishPull(const PullState& state, std::vector<int64_t>* applied);
  // Checks a pull reply from server `s` for `batch` and copies its payloads
  // (from the message, or from `link`'s pull region) into *weights.
  absl::Status TakePullReply(int s, const std::vector<int32_t>& batch,
                             const grpc::ByteBuffer& reply, const ShmLink* link,
                             std::vector<std::vector<float>>* weights,
                             std::vector<int64_t>* applied, std::atomic<int64_t>* bytes);
  // Writes a push's payloads into `link`'s push region.
  static void WriteToShm(DType dtype, const std::vector<PushChunk>& chunks, const ShmLink& link);
  // Returns the payload bytes of the push; with `params`, of those
  // parameters' chunks only.
  int64_t AddPushCalls(const PushHeader& header, const std::vector<std::vector<float>>& grads,
                       std::vector<Call>* calls, const std::vector<int>* params = nullptr);
  // A push's header: iteration `clock`, the push context's fields.
  PushHeader Header(int64_t clock, int num_samples, float grad_norm);
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
  // [server]: its address, where its chunks lie in a segment, the segment
  // attached (or null), and the attempts to attach one so far.
  std::vector<std::string> addresses_;
  std::vector<ShmLayout> shm_layouts_;
  std::vector<std::unique_ptr<ShmLink>> shm_;
  std::vector<int> shm_tries_;
  // Segments a server lost, kept mapped until the calls that may hold them
  // are done (the end of RunCalls).
  std::vector<std::unique_ptr<ShmLink>> lost_shm_;
  std::atomic<int> shm_segments_{0};
  // Attempts made so far (PullRequest.shm_sequence), and the attempt in
  // which each server's segment was last asked for.
  uint64_t attempts_ = 0;
  std::vector<uint64_t> shm_asked_in_;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_PS_CLIENT_H_
