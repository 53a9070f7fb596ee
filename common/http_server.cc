#include "common/http_server.h"

#include <microhttpd.h>
#include <netdb.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/security.h"

namespace pstrain {
namespace {

int Send(MHD_Connection* connection, const HttpResponse& r, bool head, bool challenge) {
  MHD_Response* response = MHD_create_response_from_buffer(
      head ? 0 : r.body.size(), const_cast<char*>(r.body.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, r.content_type.c_str());
  MHD_add_response_header(response, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
  if (challenge) MHD_add_response_header(response, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
  const int ret = MHD_queue_response(connection, static_cast<unsigned>(r.code), response);
  MHD_destroy_response(response);
  return ret;
}

MHD_Result Dispatch(void* cls, MHD_Connection* connection, const char* url, const char* method,
                    const char* /*version*/, const char* /*upload_data*/,
                    size_t* upload_data_size, void** /*req_cls*/) {
  // A request with a body is refused below; MHD hands over its bytes in
  // further calls, which we drop.
  if (*upload_data_size != 0) {
    *upload_data_size = 0;
    return MHD_YES;
  }
  auto* server = static_cast<HttpServer*>(cls);
  server->deadlines().Busy(connection);
  return server->Answer(connection, url, method) == MHD_YES ? MHD_YES : MHD_NO;
}

void OnConnection(void* cls, MHD_Connection* connection, void** /*socket_context*/,
                  MHD_ConnectionNotificationCode code) {
  RequestDeadlines& deadlines = static_cast<HttpServer*>(cls)->deadlines();
  if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
    deadlines.Closed(connection);
    return;
  }
  const MHD_ConnectionInfo* info =
      MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (info != nullptr) deadlines.Started(connection, info->connect_fd, absl::Now());
}

void OnCompleted(void* cls, MHD_Connection* connection, void** /*req_cls*/,
                 MHD_RequestTerminationCode /*code*/) {
  static_cast<HttpServer*>(cls)->deadlines().Answered(connection, absl::Now());
}

// The first address `host` names (numeric or a name), with `port`.
absl::StatusOr<sockaddr_storage> Resolve(const std::string& host, int port, bool* ipv6) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(port);
  const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
  if (rc != 0 || found == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve host '", host, "': ", gai_strerror(rc)));
  }
  sockaddr_storage addr{};
  std::memcpy(&addr, found->ai_addr, found->ai_addrlen);
  *ipv6 = found->ai_family == AF_INET6;
  freeaddrinfo(found);
  return addr;
}

// Raises this process's soft open-file limit towards its hard one (as Go's
// runtime does at start-up), to at most 65536 (code that walks every
// descriptor stays quick), and returns it (0: unlimited).
uint64_t RaiseOpenFileLimit() {
  constexpr rlim_t kEnough = 65536;
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return 1024;
  const rlim_t want = std::min(lim.rlim_max, kEnough);
  if (lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur < want) {
    rlimit raised = lim;
    raised.rlim_cur = want;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  }
  return lim.rlim_cur == RLIM_INFINITY ? 0 : static_cast<uint64_t>(lim.rlim_cur);
}

}  // namespace

void RequestDeadlines::Started(const void* connection, int fd, absl::Time now) {
  absl::MutexLock lock(&mu_);
  open_[connection] = Entry{fd, now + deadline_};
}

void RequestDeadlines::Busy(const void* connection) {
  absl::MutexLock lock(&mu_);
  if (auto it = open_.find(connection); it != open_.end()) it->second.due = absl::InfiniteFuture();
}

void RequestDeadlines::Answered(const void* connection, absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (auto it = open_.find(connection); it != open_.end()) it->second.due = now + deadline_;
}

void RequestDeadlines::Closed(const void* connection) {
  absl::MutexLock lock(&mu_);
  open_.erase(connection);
}

void RequestDeadlines::Expire(absl::Time now, const std::function<void(int fd)>& close) {
  absl::MutexLock lock(&mu_);
  for (auto& [connection, entry] : open_) {
    if (entry.due > now) continue;
    close(entry.fd);
    entry.due = absl::InfiniteFuture();  // closed: MHD will say so
  }
}

int HttpConnectionLimit(uint64_t open_files) {
  constexpr uint64_t kMost = 1024, kLeast = 16, kKept = 512;
  if (open_files == 0) return static_cast<int>(kMost);
  const uint64_t spare = open_files > kKept ? (open_files - kKept) / 2 : 0;
  return static_cast<int>(std::clamp(spare, kLeast, kMost));
}

int HttpServer::Answer(MHD_Connection* connection, const char* url, const char* method) const {
  const bool head = std::strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
  if (!head && std::strcmp(method, MHD_HTTP_METHOD_GET) != 0) {
    return Send(connection, {405, "text/plain; charset=utf-8", "only GET\n"}, false, false);
  }
  const char* authorization =
      MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
  const char* token = MHD_lookup_connection_value(connection, MHD_GET_ARGUMENT_KIND, "token");
  if (!HttpAuthorized(authorization, token)) {
    return Send(connection,
                {401, "text/plain; charset=utf-8",
                 "missing or wrong bearer token (see --auth_token_file)\n"},
                head, true);
  }
  auto it = handlers_.find(url);
  if (it == handlers_.end()) {
    return Send(connection, {404, "text/plain; charset=utf-8", "no such page\n"}, head, false);
  }
  return Send(connection, it->second(), head, false);
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const std::string& host, int port, std::map<std::string, HttpHandler> handlers,
    const HttpLimits& limits) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("port ", port, ": expected 0 to 65535"));
  }
  bool ipv6 = false;
  absl::StatusOr<sockaddr_storage> addr = Resolve(host, port, &ipv6);
  if (!addr.ok()) return addr.status();
  std::unique_ptr<HttpServer> server(new HttpServer(std::move(handlers), limits.request_deadline));
  // poll(), not MHD_USE_AUTO's epoll: libmicrohttpd 0.9.75's epoll loop
  // leaves a connection its client closed while it waited in the listen
  // queue (a flood beyond the connection limit) open until its idle timeout,
  // so after a 500-connection flood the queue drained 64 connections per
  // timeout (60 s) while the port answered nothing. poll() sees the close at
  // once and, unlike select(), has no FD_SETSIZE cap on the limit.
  unsigned flags = MHD_USE_POLL_INTERNAL_THREAD;
  if (ipv6) flags |= MHD_USE_IPv6;
  const unsigned limit = static_cast<unsigned>(
      limits.connections > 0 ? limits.connections : HttpConnectionLimit(RaiseOpenFileLimit()));
  HttpServer* s = server.get();
  server->daemon_ = MHD_start_daemon(
      flags, static_cast<uint16_t>(port), nullptr, nullptr, &Dispatch, s, MHD_OPTION_SOCK_ADDR,
      reinterpret_cast<sockaddr*>(&*addr), MHD_OPTION_CONNECTION_LIMIT, limit,
      MHD_OPTION_CONNECTION_TIMEOUT, limits.idle_timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
      static_cast<size_t>(32 << 10), MHD_OPTION_NOTIFY_CONNECTION, &OnConnection, s,
      MHD_OPTION_NOTIFY_COMPLETED, &OnCompleted, s, MHD_OPTION_END);
  if (server->daemon_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot serve HTTP on ", host, ":", port,
                                               " (in use, or not an address of this machine)"));
  }
  const MHD_DaemonInfo* info = MHD_get_daemon_info(server->daemon_, MHD_DAEMON_INFO_BIND_PORT);
  server->port_ = info != nullptr ? info->port : port;
  // Past its deadline, a connection's socket is shut down: libmicrohttpd
  // then reads its end and closes it.
  server->watcher_ = std::thread([s] {
    while (!s->stop_.WaitForNotificationWithTimeout(absl::Milliseconds(250))) {
      s->deadlines_.Expire(absl::Now(), [](int fd) { shutdown(fd, SHUT_RDWR); });
    }
  });
  return server;
}

HttpServer::~HttpServer() {
  stop_.Notify();
  if (watcher_.joinable()) watcher_.join();
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
}

std::string HostOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  std::string host = colon == std::string::npos ? address : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host;
}

std::string HostForAddress(const std::string& host) {
  return host.find(':') == std::string::npos ? host : absl::StrCat("[", host, "]");
}

}  // namespace pstrain
