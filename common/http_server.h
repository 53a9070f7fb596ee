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

#include "absl/status/statusor.h"

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

class HttpServer {
 public:
  // Serves `handlers` (by exact path) on host:port; port 0 lets the OS
  // choose. At most HttpConnectionLimit() connections at once (the soft
  // open-file limit is first raised to the hard one), each closed after
  // kHttpIdleTimeoutS s without a byte, 32 KiB of request per connection:
  // a flood is refused, not buffered, and hundreds of idle or slow clients
  // leave room for real requests.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const std::string& host, int port, std::map<std::string, HttpHandler> handlers);
  ~HttpServer();  // stops serving

  int port() const { return port_; }

  // Answers one request (called by libmicrohttpd's thread).
  int Answer(MHD_Connection* connection, const char* url, const char* method) const;

 private:
  explicit HttpServer(std::map<std::string, HttpHandler> handlers)
      : handlers_(std::move(handlers)) {}

  const std::map<std::string, HttpHandler> handlers_;
  MHD_Daemon* daemon_ = nullptr;
  int port_ = 0;
};

// Seconds a connection may stay silent before it is closed.
inline constexpr unsigned kHttpIdleTimeoutS = 5;

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
