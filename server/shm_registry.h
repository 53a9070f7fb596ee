// The server's side of the shared-memory data plane (common/shm.h).
//
// A worker on this host asks the server, over its authenticated gRPC
// connection (ParameterServer.OpenShm), for a one-time ticket; it presents
// the ticket on the server's abstract Unix socket and receives a new
// segment's descriptor (SCM_RIGHTS). A process that did not pass the gRPC
// checks has no ticket and gets nothing; a peer of another user is refused
// too. The segment lives while that socket connection stays open and a
// grace of seconds after (a push its worker sent just before it was killed
// is still applied, as one in a gRPC message would be): a worker that exits
// or is killed takes its segments with it, and the segments are never more
// than max_segments. No gRPC in here: the service
// (server/ps_service.h) hands out the tickets, looks segments up, and
// answers the doorbell frames (common/shm.h) the connections carry once
// attached: the registry's thread reads them and hands each to the
// service's handler, which answers through the connection's ShmBell from
// any thread.
#ifndef PSTRAIN_SERVER_SHM_REGISTRY_H_
#define PSTRAIN_SERVER_SHM_REGISTRY_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/log_limit.h"
#include "common/shm.h"

namespace pstrain {

// An attached worker's connection, for the answers to its frames: any
// thread may reply; a no-op once the connection closed.
class ShmBell {
 public:
  ShmBell(int fd, uint64_t segment) : fd_(fd), segment_(segment) {}
  // The segment granted on this connection: the only one its frames may name.
  uint64_t segment() const { return segment_; }
  // Sends a reply frame without blocking. A worker that stopped reading its
  // answers (no room left) loses the connection, and with it the segment.
  void Reply(uint64_t seq, int32_t code, std::string_view message, std::string_view body);
  // The registry's, when it closes the connection.
  void Close();
  // Whether the connection closed: its worker waits for no answer.
  bool closed() const {
    absl::MutexLock lock(&mu_);
    return fd_ < 0;
  }

 private:
  mutable absl::Mutex mu_;
  int fd_ ABSL_GUARDED_BY(mu_);  // -1 once closed
  const uint64_t segment_;
};

class ShmRegistry {
 public:
  // Takes an attached connection's request frame (on the registry's
  // thread); answers it through `bell`, now or later.
  using Handler = std::function<void(std::shared_ptr<ShmBell> bell, ShmFrame frame)>;

  struct Options {
    int max_segments = 64;                           // attached and promised at once
    absl::Duration ticket_life = absl::Seconds(10);  // a ticket unused this long expires
    absl::Duration grace = absl::Seconds(5);         // a segment outlives its connection
    absl::Duration ticket_wait = absl::Seconds(5);   // a connection waits for its ticket
  };
  // Listens on a fresh abstract socket and serves it on a thread of its own.
  static absl::StatusOr<std::unique_ptr<ShmRegistry>> Start(Options options);
  static absl::StatusOr<std::unique_ptr<ShmRegistry>> Start() { return Start(Options()); }
  // Stops the thread, closes every connection and drops the segments (the
  // ones in use stay mapped until their users let go).
  ~ShmRegistry();
  // Stops the thread: no frame is handed over after it returns (the
  // service's shutdown; the connections stay open until destruction).
  void Stop();

  // The abstract socket's name (without the leading NUL).
  const std::string& socket_name() const { return name_; }
  // A ticket (16 random bytes) for one segment of `bytes`;
  // RESOURCE_EXHAUSTED when max_segments are attached or promised.
  absl::StatusOr<std::string> Issue(int64_t bytes);
  // The attached segment `id`, or null (never granted, or its worker's
  // connection closed more than the grace ago).
  std::shared_ptr<ShmSegment> Find(uint64_t id) const;
  // Segments whose workers' connections are open.
  int attached() const;
  // Connections refused so far (another user's, too many waiting, no valid
  // ticket): counted, and logged at most 5 lines a minute.
  int64_t refused() const { return refused_.load(std::memory_order_relaxed); }
  // Who answers the frames; until set, an attached connection that sends
  // one is closed.
  void SetHandler(Handler handler);

 private:
  struct Ticket {
    int64_t bytes;
    absl::Time expires;
  };
  struct Conn {
    int fd;
    uint64_t segment = 0;  // 0: waiting for its ticket
    absl::Time deadline;   // for the ticket
    std::string ticket;    // its bytes so far
    // Once attached: its answers' way back, and its frames so far.
    std::shared_ptr<ShmBell> bell;
    std::shared_ptr<FrameReader> frames;
  };
  ShmRegistry(Options options, std::string name, int listen_fd, int wake_fd);
  void Loop();
  // Accepts the waiting connections of this host's user (and root), up to
  // 2 x max_segments waiting for their tickets; false when out of
  // descriptors (the caller pauses accepting).
  bool AcceptAll();
  // Reads a waiting connection's ticket and answers it; false: close it.
  bool Grant(Conn& conn);
  // Reads an attached connection's whole frames and hands each to the
  // handler, in order; false: close it (closed by the worker, or not frames).
  bool Ring(Conn& conn);
  // Drops expired tickets and connections that waited too long.
  void Expire(absl::Time now);
  // Counts a refused connection and logs why (at most 5 lines a minute).
  void Refused(const std::string& why);

  const Options options_;
  const std::string name_;
  const int listen_fd_, wake_fd_;
  std::vector<Conn> conns_;  // the thread's own
  absl::Time accept_paused_until_;  // the thread's own: out of descriptors
  std::atomic<int64_t> refused_{0};
  LogLimit refused_log_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Ticket> tickets_ ABSL_GUARDED_BY(mu_);
  struct Attached {
    std::shared_ptr<ShmSegment> segment;
    // When its worker's connection closed, plus the grace: requests the
    // worker sent before it died still find the segment until then.
    absl::Time drop_at = absl::InfiniteFuture();
  };
  absl::flat_hash_map<uint64_t, Attached> segments_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  Handler handler_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_SHM_REGISTRY_H_
