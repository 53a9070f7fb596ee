// A small HTTP/1.1 endpoint beside a daemon's gRPC service, for /metrics
// (Prometheus) and the scheduler's dashboard. Built on GNU libmicrohttpd
// (Debian's libmicrohttpd-dev): a mature C library made to be embedded, with
// its own polling thread and per-connection limits, so nothing here parses
// HTTP. Only GET (and HEAD) of the registered paths is served; the token of
// --auth_token_file is required when one is configured (common/security.h).
#ifndef PSTRAIN_COMMON_HTTP_SERVER_H_
#define PSTRAIN_COMMON_HTTP_SERVER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

struct MHD_Connection;
struct MHD_Daemon;

namespace pstrain {

struct HttpResponse {
  int code = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// Builds the answer to a GET of one path; runs on the server's thread.
using HttpHandler = std::function<HttpResponse()>;

// What one client may hold of the server.
struct HttpLimits {
  int connections = 0;         // at once; 0: HttpConnectionLimit() of the open-file limit
  unsigned idle_timeout_s = 5;  // a connection silent this long is closed
  // A connection gets this long from its start, or from its last answer, to
  // send a whole request header, however slowly it trickles bytes (a byte
  // every few seconds would keep it from the idle timeout for ever).
  absl::Duration request_deadline = absl::Seconds(10);
};

// The connections' request deadlines (HttpLimits::request_deadline): what
// HttpServer's watcher closes, apart from the sockets.
class RequestDeadlines {
 public:
  explicit RequestDeadlines(absl::Duration deadline) : deadline_(deadline) {}
  void Started(const void* connection, int fd, absl::Time now);
  void Busy(const void* connection);                         // its request is being answered
  void Answered(const void* connection, absl::Time now);     // the next one's time starts
  void Closed(const void* connection);
  // Calls `close(fd)` for each connection past its deadline at `now`,
  // once; under the lock that Closed() takes, so the socket is still the
  // connection's.
  void Expire(absl::Time now, const std::function<void(int fd)>& close);

 private:
  struct Entry {
    int fd = -1;
    absl::Time due = absl::InfiniteFuture();
  };
  const absl::Duration deadline_;
  absl::Mutex mu_;
  std::map<const void*, Entry> open_ ABSL_GUARDED_BY(mu_);
};

class HttpServer {
 public:
  // Serves `handlers` (by exact path) on host:port; port 0 lets the OS
  // choose. At most `limits.connections` at once (by default up to 1024,
  // after the soft open-file limit is raised towards the hard one), each closed
  // when idle or past its request deadline, 32 KiB of request per
  // connection: a flood is refused, not buffered, and hundreds of idle or
  // slow clients leave room for real requests.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const std::string& host, int port, std::map<std::string, HttpHandler> handlers,
      const HttpLimits& limits = HttpLimits());
  ~HttpServer();  // stops serving

  int port() const { return port_; }

  // Answers one request (called by libmicrohttpd's thread).
  int Answer(MHD_Connection* connection, const char* url, const char* method) const;
  RequestDeadlines& deadlines() { return deadlines_; }

 private:
  HttpServer(std::map<std::string, HttpHandler> handlers, absl::Duration request_deadline)
      : handlers_(std::move(handlers)), deadlines_(request_deadline) {}

  const std::map<std::string, HttpHandler> handlers_;
  RequestDeadlines deadlines_;
  absl::Notification stop_;
  std::thread watcher_;  // closes connections past their request deadline
  MHD_Daemon* daemon_ = nullptr;
  int port_ = 0;
};

// How many HTTP connections a process with `open_files` file descriptors
// (its soft RLIMIT_NOFILE; 0 for unlimited) serves at once: 1024, or less
// where descriptors are few, keeping 512 of them and half the rest for the
// daemon's RPCs, files and peers (at least 16).
int HttpConnectionLimit(uint64_t open_files);

// The host part of "HOST:PORT" ("[::1]:80" -> "::1"), where a daemon's HTTP
// endpoint listens beside its gRPC one.
std::string HostOf(const std::string& address);
// The reverse for an address: "::1" -> "[::1]", others unchanged.
std::string HostForAddress(const std::string& host);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_HTTP_SERVER_H_
