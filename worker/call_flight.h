// One attempt at a worker's parameter-client calls (worker/ps_client.h):
// each call a batch of one server's chunks, pushed or pulled. They go all
// at once -- as gRPC calls on the async API, spread over the channels to
// their server, or, when every one of them goes to a server attached
// through shared memory, as frames on the segments' sockets (the doorbell,
// common/shm.h) -- except that the pushes under way at one server stay
// within the window its last push response gave (one at a time until a
// response says). The calling thread drains the answers itself (no gRPC
// thread hands them over), and cancels what is under way once the caller
// gives up. Not thread-safe.
#ifndef PSTRAIN_WORKER_CALL_FLIGHT_H_
#define PSTRAIN_WORKER_CALL_FLIGHT_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "worker/shm_links.h"

namespace pstrain {

// One call: a batch of one server's chunks.
struct ClientCall {
  bool is_pull = false;
  int home = 0;    // the server whose chunks it carries, by the partition
  int server = 0;  // where it goes: `home`, or the server serving its chunks now
  int channel = 0;
  // Builds the request for the path its server takes: through the shared
  // memory `link` (a push writes its payloads there), or with the payloads
  // in the message (null).
  std::function<grpc::ByteBuffer(ShmLink* link)> encode;
  grpc::ByteBuffer request;
  bool encoded = false;
  ShmLink* link = nullptr;  // what `request` was encoded for
  // Checks and consumes a reply of server `server` (on the calling
  // thread); `link` as above.
  std::function<absl::Status(const grpc::ByteBuffer&, const ShmLink* link, int server)> finish;
  bool done = false;
};

// What a flight uses of its client; everything outlives the flight.
struct FlightEnv {
  // [server][channel]
  std::vector<std::vector<std::unique_ptr<grpc::GenericStub>>>* stubs;
  // [server]: bytes of pushes that may be under way at once (updated from
  // the push responses).
  std::vector<int64_t>* push_window;
  ShmLinks* links;
  std::atomic<int64_t>* rpcs;       // calls issued (frames too)
  std::atomic<int64_t>* shm_rings;  // of them, frames
  uint64_t* next_seq;               // the last frame's (ShmFrameHeader.seq)
  // True: the caller gave up (the job ended, the cluster rolls back).
  std::function<bool()> abandon;
};

class CallFlight {
 public:
  // `calls` (encoded) outlive the flight; `bell`: they go as frames.
  CallFlight(std::vector<ClientCall>& calls, FlightEnv env, bool bell);
  ~CallFlight();

  // Runs the calls `todo` and waits for every one; their results, by
  // index into the calls (the others' OK).
  std::vector<absl::Status> Run(const std::vector<int>& todo, int* next_channel);

 private:
  // Whether call i may start now (a pull always; a push within its
  // server's window, or alone; frames within kMaxRingsUnderWay); counts it
  // if so.
  bool Admit(int i);
  void Launch(int i, int* next_channel);
  // Launch of a call that goes as a frame.
  void Ring(int i);
  // Waits for the frames' answers (and launches the held pushes as room
  // frees); the gRPC calls' counterpart is the completion queue.
  void AwaitRings(int* next_channel);
  // Waits for the gRPC calls' answers.
  void AwaitCalls(const std::vector<int>& todo, int* next_channel);
  // Ends the frames still under way on `link` (null: all) with `status`.
  void EndRings(const ShmLink* link, const grpc::Status& status);
  void LaunchHeld(int* next_channel);
  // Takes call i's reply (and a push's window from it).
  void Complete(int i);

  std::vector<ClientCall>& calls_;
  const FlightEnv env_;
  const bool bell_;
  std::vector<absl::Status> results_;
  std::vector<grpc::Status> statuses_;
  std::vector<grpc::ByteBuffer> replies_;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts_;
  std::vector<std::unique_ptr<grpc::GenericClientAsyncResponseReader>> readers_;
  std::vector<int64_t> push_bytes_;  // per server, of the pushes under way
  std::deque<int> held_;             // pushes waiting for room, in order
  grpc::CompletionQueue cq_;
  int running_ = 0;
  std::vector<uint64_t> seq_;         // a frame's
  std::vector<absl::Time> deadline_;  // a frame's attempt ends
  std::vector<char> live_;            // a frame sent and not yet answered
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_CALL_FLIGHT_H_
