// StageChannels over gRPC (the StageLink service of proto/worker.proto):
// one stream per pair of neighbouring stages of a replica, opened by the
// stage before (StageLinkClient) and served by the stage after
// (StageLinkService); each direction in order, with bounded inboxes, so a
// fast sender waits (gRPC flow control) instead of filling memory.
//
// Link generations: when a replica's pipeline restarts (a stage was replaced,
// or the cluster rolled back) its stages link anew in a newer link generation. A
// stream and every tensor carry the link generation they were made in; a channel
// drops what is older than its own link generation, and a tensor of a newer one ends
// the wait of a stage still in the older (it has to restart too).
#ifndef PSTRAIN_WORKER_STAGE_LINK_H_
#define PSTRAIN_WORKER_STAGE_LINK_H_

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "proto/worker.grpc.pb.h"
#include "worker/stage_runner.h"

namespace pstrain {

// Who is at this end of a link, and how tensors travel.
struct StageEndpoint {
  int replica = 0;
  int stage = 0;
  int64_t link_generation = 0;  // the link generation
  DType wire_dtype = FP32;
  // Tensors received and not yet taken, at most: no fewer than the
  // micro-batches of a clock (a stage takes them only in its schedule's order).
  int inbox = 8;
  // Receive fails when the peer has not connected this long.
  absl::Duration connect_timeout = absl::Seconds(60);
  // A closing stage before waits this long for the stage after to read
  // what was sent.
  absl::Duration close_grace = absl::Seconds(30);
};

// One end of a stream: Send writes to the stream attached, Receive takes
// what the stream delivered. Thread-safe.
class StreamChannel : public StageChannel {
 public:
  // `peer` names the other end in errors ("stage 0 of replica 1").
  StreamChannel(StageEndpoint me, std::string peer)
      : me_(me), peer_(std::move(peer)), link_generation_(me.link_generation) {}

  absl::Status Send(StageTensor tensor) override;
  absl::StatusOr<StageTensor> Receive() override;
  int64_t bytes_sent() const override { return sent_.load(); }

  // A stream of link generation `link generation` writes through `write`, until Detach
  // with the token returned (a newer stream takes over from an older one);
  // `cancel` ends it (see Reset and Close).
  int Attach(std::function<bool(const StageMessage&)> write, std::function<void()> cancel,
             int64_t link_generation);
  // A message from the stream: waits while the inbox is full; an error for
  // a message that is not the peer's; one of an older link generation is dropped.
  absl::Status Deliver(const StageMessage& message, int peer_replica, int peer_stage);
  // Stream `token` ended: unless a newer one is attached, Send and (once the
  // inbox is empty) Receive fail with `why`.
  void Detach(int token, absl::Status why);
  // Ends the waits of Send and Receive now: `why` is their status until
  // Reset, and the stream attached ends (unless it is of a newer link generation).
  void Close(absl::Status why);
  // The link starts over in `link generation`: what is older is dropped (a stream of
  // an older link generation is ended) and Receive waits for the peer's stream.
  void Reset(int64_t link_generation);
  int64_t link_generation() const;

 private:
  const StageEndpoint me_;
  const std::string peer_;
  std::atomic<int64_t> sent_{0};
  absl::Mutex write_mu_;
  std::function<bool(const StageMessage&)> write_ ABSL_GUARDED_BY(write_mu_);
  mutable absl::Mutex mu_;
  int64_t link_generation_ ABSL_GUARDED_BY(mu_);
  struct Received {
    int64_t link_generation;
    StageTensor tensor;
  };
  std::deque<Received> inbox_ ABSL_GUARDED_BY(mu_);
  bool attached_ ABSL_GUARDED_BY(mu_) = false;
  int64_t stream_generation_ ABSL_GUARDED_BY(mu_) = 0;  // of the stream attached
  std::function<void()> cancel_ ABSL_GUARDED_BY(mu_);
  int token_ ABSL_GUARDED_BY(mu_) = 0;        // of the stream attached last
  absl::Status closed_ ABSL_GUARDED_BY(mu_);  // not OK once detached
};

// The stage after's side: serves the one stream of the stage before. A
// worker's daemon serves it from the start; it takes streams once
// Configure said which stage this worker is (a stream that comes earlier
// waits up to the connect timeout).
class StageLinkService final : public StageLink::Service {
 public:
  StageLinkService() = default;
  explicit StageLinkService(StageEndpoint me) { Configure(me); }
  void Configure(StageEndpoint me);
  // Tensors from and to the stage before (Receive waits for it to connect);
  // null until Configure.
  StreamChannel* before();

  grpc::Status Exchange(grpc::ServerContext* ctx,
                        grpc::ServerReaderWriter<StageMessage, StageMessage>* stream) override;

 private:
  absl::Mutex mu_;
  StageEndpoint me_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<StreamChannel> before_ ABSL_GUARDED_BY(mu_);
};

// The stage before's side: the stream to the stage after at `address`.
class StageLinkClient {
 public:
  StageLinkClient(StageEndpoint me, const std::string& address);
  // Closes the stream: what was sent still arrives (the stage after reads
  // it within `close_grace`; then the stream is cancelled).
  ~StageLinkClient();
  StreamChannel* after() { return &after_; }
  // Ends the stream now: Send and Receive fail with `why`, and closing
  // does not wait for the stage after to read what was sent.
  void Abort(absl::Status why);

 private:
  const StageEndpoint me_;
  StreamChannel after_;
  std::unique_ptr<StageLink::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<StageMessage, StageMessage>> stream_;
  int token_ = 0;
  std::thread reader_;
  absl::Notification reader_done_;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_STAGE_LINK_H_
