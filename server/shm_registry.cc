#include "server/shm_registry.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"

namespace pstrain {
namespace {

constexpr size_t kTicketBytes = 16;

}  // namespace

absl::StatusOr<std::unique_ptr<ShmRegistry>> ShmRegistry::Start(Options options) {
  const std::string name =
      absl::StrCat("pstrain-ps-", getpid(), "-", absl::BytesToHexString(RandomBytes(8)));
  absl::StatusOr<int> listen_fd = ListenAbstract(name);
  if (!listen_fd.ok()) return listen_fd.status();
  const int wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake < 0) {
    close(*listen_fd);
    return absl::UnavailableError(absl::StrCat("eventfd: ", std::strerror(errno)));
  }
  return std::unique_ptr<ShmRegistry>(new ShmRegistry(options, name, *listen_fd, wake));
}

ShmRegistry::ShmRegistry(Options options, std::string name, int listen_fd, int wake_fd)
    : options_(options), name_(std::move(name)), listen_fd_(listen_fd), wake_fd_(wake_fd) {
  thread_ = std::thread([this] { Loop(); });
}

void ShmRegistry::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
}

ShmRegistry::~ShmRegistry() {
  Stop();
  for (const Conn& c : conns_) {
    if (c.bell != nullptr) {
      c.bell->Close();
    } else {
      close(c.fd);
    }
  }
  close(listen_fd_);
  close(wake_fd_);
}

absl::StatusOr<std::string> ShmRegistry::Issue(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  for (auto it = tickets_.begin(); it != tickets_.end();) {
    if (it->second.expires < now) {
      tickets_.erase(it++);
    } else {
      ++it;
    }
  }
  if (static_cast<int>(tickets_.size() + segments_.size()) >= options_.max_segments) {
    return absl::ResourceExhaustedError(
        absl::StrCat("shared memory: ", segments_.size(), " segments attached and ",
                     tickets_.size(), " promised here, the most this server gives out"));
  }
  std::string ticket = RandomBytes(kTicketBytes);
  tickets_[ticket] = {bytes, now + options_.ticket_life};
  return ticket;
}

std::shared_ptr<ShmSegment> ShmRegistry::Find(uint64_t id) const {
  absl::MutexLock lock(&mu_);
  auto it = segments_.find(id);
  return it == segments_.end() ? nullptr : it->second.segment;
}

int ShmRegistry::attached() const {
  absl::MutexLock lock(&mu_);
  int open = 0;
  for (const auto& [id, a] : segments_) open += a.drop_at == absl::InfiniteFuture();
  return open;
}

void ShmRegistry::Loop() {
  std::vector<pollfd> fds;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
    }
    const bool accepting = absl::Now() >= accept_paused_until_;
    fds.assign({{wake_fd_, POLLIN, 0}, {accepting ? listen_fd_ : -1, POLLIN, 0}});
    for (const Conn& c : conns_) fds.push_back({c.fd, POLLIN, 0});
    if (poll(fds.data(), fds.size(), 500) < 0 && errno != EINTR) {
      spdlog::error("shared memory: poll: {}", std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0 && !AcceptAll()) {
      accept_paused_until_ = absl::Now() + absl::Milliseconds(100);
    }
    // The connections polled are the first fds.size() - 2 of conns_ (the
    // new ones come after them).
    std::vector<Conn> kept;
    for (size_t i = 0; i < conns_.size(); ++i) {
      Conn& c = conns_[i];
      const short events = i + 2 < fds.size() ? fds[i + 2].revents : 0;
      bool keep = true;
      if (events != 0) keep = c.segment == 0 ? Grant(c) : Ring(c);
      if (keep) {
        kept.push_back(c);
        continue;
      }
      if (c.bell != nullptr) {
        c.bell->Close();  // closes c.fd
      } else {
        close(c.fd);
      }
      if (c.segment != 0) {
        absl::MutexLock lock(&mu_);
        auto it = segments_.find(c.segment);
        if (it != segments_.end()) it->second.drop_at = absl::Now() + options_.grace;
      }
    }
    conns_ = std::move(kept);
    Expire(absl::Now());
  }
}

bool ShmRegistry::AcceptAll() {
  while (true) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return errno != EMFILE && errno != ENFILE && errno != ENOBUFS && errno != ENOMEM;
    ucred peer{};
    socklen_t len = sizeof(peer);
    const bool same_user = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) == 0 &&
                           (peer.uid == geteuid() || peer.uid == 0);
    int waiting = 0;
    for (const Conn& c : conns_) waiting += c.segment == 0;
    if (!same_user || waiting >= 2 * options_.max_segments) {
      Refused(absl::StrCat("a connection from pid ", peer.pid, " (uid ", peer.uid, "): ",
                           same_user ? "too many waiting for their tickets" : "another user"));
      close(fd);
      continue;
    }
    conns_.push_back({fd, 0, absl::Now() + options_.ticket_wait, ""});
  }
}

void ShmRegistry::Refused(const std::string& why) {
  const int64_t refused = refused_.fetch_add(1, std::memory_order_relaxed) + 1;
  int64_t held_back = 0;
  if (!refused_log_.Allow(&held_back)) return;
  spdlog::warn("shared memory: refused {} ({} refused so far{})", why, refused,
               held_back > 0 ? absl::StrCat("; ", held_back, " such lines held back") : "");
}

bool ShmRegistry::Grant(Conn& conn) {
  char buf[kTicketBytes];
  const ssize_t got = recv(conn.fd, buf, kTicketBytes - conn.ticket.size(), MSG_DONTWAIT);
  if (got < 0 && (errno == EAGAIN || errno == EINTR)) return true;
  if (got <= 0) return false;  // closed before its ticket
  conn.ticket.append(buf, static_cast<size_t>(got));
  if (conn.ticket.size() < kTicketBytes) return true;  // more to come
  ShmGrant grant;
  std::unique_ptr<ShmSegment> segment;
  {
    absl::MutexLock lock(&mu_);
    auto it = tickets_.find(conn.ticket);
    if (it != tickets_.end() && it->second.expires >= absl::Now()) grant.bytes = it->second.bytes;
    if (it != tickets_.end()) tickets_.erase(it);  // once, used or not
  }
  if (grant.bytes > 0) {
    absl::StatusOr<std::unique_ptr<ShmSegment>> made = ShmSegment::Create(grant.bytes);
    if (made.ok()) {
      segment = std::move(*made);
    } else {
      spdlog::warn("shared memory: {}", made.status().message());
    }
  }
  if (segment == nullptr) {
    Refused("a connection: no valid ticket");
    (void)SendWithFd(conn.fd, &grant, sizeof(grant), -1);  // id 0: refused
    return false;
  }
  do {
    std::memcpy(&grant.id, RandomBytes(sizeof(grant.id)).data(), sizeof(grant.id));
  } while (grant.id == 0);
  const int fd = segment->fd();
  {
    absl::MutexLock lock(&mu_);
    segments_[grant.id] = {std::move(segment), absl::InfiniteFuture()};
  }
  if (!SendWithFd(conn.fd, &grant, sizeof(grant), fd).ok()) {
    absl::MutexLock lock(&mu_);
    segments_.erase(grant.id);
    return false;
  }
  conn.segment = grant.id;
  conn.bell = std::make_shared<ShmBell>(conn.fd, grant.id);
  conn.frames = std::make_shared<FrameReader>();
  return true;
}

bool ShmRegistry::Ring(Conn& conn) {
  const absl::Status filled = conn.frames->Fill(conn.fd);
  Handler handler;
  {
    absl::MutexLock lock(&mu_);
    handler = handler_;
  }
  while (true) {
    ShmFrame frame;
    const absl::StatusOr<bool> next = conn.frames->Next(&frame);
    if (!next.ok() || (*next && handler == nullptr)) {
      spdlog::warn("shared memory: closed segment {}'s connection: {}", conn.segment,
                   next.ok() ? "a frame before the server serves them" : next.status().message());
      return false;
    }
    if (!*next) break;
    handler(conn.bell, std::move(frame));
  }
  return filled.ok();
}

void ShmRegistry::SetHandler(Handler handler) {
  absl::MutexLock lock(&mu_);
  handler_ = std::move(handler);
}

void ShmBell::Reply(uint64_t seq, int32_t code, std::string_view message, std::string_view body) {
  const std::string frame = EncodeFrame(code, seq, message, body);
  absl::MutexLock lock(&mu_);
  if (fd_ < 0) return;
  const ssize_t sent = send(fd_, frame.data(), frame.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  if (sent != static_cast<ssize_t>(frame.size())) {
    // A partial frame cannot be finished later without blocking: end the
    // connection (the registry's poll sees it and closes it).
    spdlog::warn("shared memory: segment {}'s worker reads no answers: connection shut",
                 segment_);
    shutdown(fd_, SHUT_RDWR);
  }
}

void ShmBell::Close() {
  absl::MutexLock lock(&mu_);
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

void ShmRegistry::Expire(absl::Time now) {
  std::vector<Conn> kept;
  for (const Conn& c : conns_) {
    if (c.segment == 0 && c.deadline < now) {
      close(c.fd);
    } else {
      kept.push_back(c);
    }
  }
  conns_ = std::move(kept);
  absl::MutexLock lock(&mu_);
  for (auto it = segments_.begin(); it != segments_.end();) {
    if (it->second.drop_at < now) {
      segments_.erase(it++);
    } else {
      ++it;
    }
  }
  for (auto it = tickets_.begin(); it != tickets_.end();) {
    if (it->second.expires < now) {
      tickets_.erase(it++);
    } else {
      ++it;
    }
  }
}

}  // namespace pstrain
