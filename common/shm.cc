#include "common/shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace pstrain {
namespace {

constexpr char kMemfdName[] = "pstrain-shm";
constexpr int kSeals = F_SEAL_SHRINK | F_SEAL_GROW;

absl::Status Errno(const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// sockaddr_un of an abstract name (a leading NUL, no terminator).
socklen_t AbstractAddress(const std::string& name, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  const size_t n = std::min(name.size(), sizeof(addr->sun_path) - 1);
  std::memcpy(addr->sun_path + 1, name.data(), n);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

}  // namespace

ShmLayout ShmLayout::OfServer(const Partition& partition, int server, int standby_copies) {
  std::vector<std::pair<int32_t, int64_t>> chunks;
  for (int32_t id : HeldChunks(partition, server, standby_copies)) {
    chunks.push_back({id, partition.chunks()[id].numel});
  }
  return Make(std::move(chunks));
}

ShmLayout ShmLayout::Make(std::vector<std::pair<int32_t, int64_t>> chunks) {
  std::sort(chunks.begin(), chunks.end());
  ShmLayout layout;
  for (const auto& [id, numel] : chunks) {
    const int64_t bytes = numel * 4;
    layout.slots_[id] = {layout.region_bytes_, bytes};
    // Slots start 64-byte aligned, so that values are aligned for any
    // dtype and no two slots share a cache line.
    layout.region_bytes_ += (bytes + 63) / 64 * 64;
  }
  return layout;
}

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Create(int64_t bytes) {
  if (bytes <= 0) return absl::InvalidArgumentError("shared memory: an empty segment");
  const int fd = memfd_create(kMemfdName, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Errno("memfd_create");
  if (ftruncate(fd, bytes) != 0 || fcntl(fd, F_ADD_SEALS, kSeals | F_SEAL_SEAL) != 0) {
    const absl::Status st = Errno("sizing or sealing a segment");
    close(fd);
    return st;
  }
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    const absl::Status st = Errno("mapping a segment");
    close(fd);
    return st;
  }
  return std::unique_ptr<ShmSegment>(new ShmSegment(fd, static_cast<char*>(data), bytes));
}

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Adopt(int fd, int64_t bytes) {
  auto refuse = [fd](const std::string& why) {
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("shared memory: refused a descriptor: ", why));
  };
  char target[256] = {0};
  const std::string link = absl::StrCat("/proc/self/fd/", fd);
  const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
  if (n < 0 ||
      !absl::StartsWith(absl::string_view(target, n), absl::StrCat("/memfd:", kMemfdName))) {
    return refuse(
        absl::StrCat("not a pstrain segment (", n < 0 ? "?" : std::string(target, n), ")"));
  }
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & kSeals) != kSeals) return refuse("not sealed against resizing");
  struct stat st;
  if (fstat(fd, &st) != 0) return refuse(std::strerror(errno));
  if (st.st_size != bytes) {
    return refuse(absl::StrCat(st.st_size, " bytes, expected ", bytes));
  }
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) return refuse(absl::StrCat("mmap: ", std::strerror(errno)));
  return std::unique_ptr<ShmSegment>(new ShmSegment(fd, static_cast<char*>(data), bytes));
}

ShmSegment::~ShmSegment() {
  munmap(data_, size_);
  close(fd_);
}

absl::StatusOr<int> ListenAbstract(const std::string& name) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  sockaddr_un addr;
  const socklen_t len = AbstractAddress(name, &addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd, 64) != 0) {
    const absl::Status st = Errno(absl::StrCat("listening on @", name));
    close(fd);
    return st;
  }
  return fd;
}

absl::StatusOr<int> ConnectAbstract(const std::string& name, absl::Duration timeout) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  const timeval tv = absl::ToTimeval(timeout);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_un addr;
  const socklen_t len = AbstractAddress(name, &addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    const absl::Status st = Errno(absl::StrCat("connecting to @", name));
    close(fd);
    return st;
  }
  return fd;
}

absl::Status SendWithFd(int sock, const void* data, size_t n, int fd) {
  iovec iov{const_cast<void*>(data), n};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  const ssize_t sent = sendmsg(sock, &msg, MSG_NOSIGNAL);
  if (sent != static_cast<ssize_t>(n)) return Errno("sending on a shared-memory socket");
  return absl::OkStatus();
}

absl::Status RecvWithFd(int sock, void* data, size_t n, int* fd) {
  *fd = -1;
  size_t got = 0;
  while (got < n) {
    iovec iov{static_cast<char*>(data) + got, n - got};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))];
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t r = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    if (r == 0) return absl::UnavailableError("the shared-memory socket was closed");
    if (r < 0) {
      if (errno == EINTR) continue;
      return Errno("receiving on a shared-memory socket");
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int received;
        std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        if (*fd < 0) {
          *fd = received;
        } else {
          close(received);
        }
      }
    }
    got += static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

std::string EncodeFrame(int32_t code, uint64_t seq, std::string_view message,
                        std::string_view body) {
  ShmFrameHeader h;
  h.bytes = static_cast<uint32_t>(sizeof(h) + message.size() + body.size());
  h.code = code;
  h.seq = seq;
  h.message_bytes = static_cast<uint32_t>(message.size());
  std::string frame(reinterpret_cast<const char*>(&h), sizeof(h));
  frame.append(message);
  frame.append(body);
  return frame;
}

absl::Status FrameReader::Fill(int sock) {
  char buf[16 << 10];
  // At most one whole largest frame buffered: a peer that writes without
  // end is read in bounded rounds (the rest stays in the socket).
  while (buffer_.size() - start_ < kMaxShmFrame + sizeof(ShmFrameHeader)) {
    const ssize_t r = recv(sock, buf, sizeof(buf), MSG_DONTWAIT);
    if (r > 0) {
      buffer_.append(buf, static_cast<size_t>(r));
      if (r < static_cast<ssize_t>(sizeof(buf))) return absl::OkStatus();
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return absl::OkStatus();
    return r == 0 ? absl::UnavailableError("the shared-memory socket was closed")
                  : Errno("reading a shared-memory socket");
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> FrameReader::Next(ShmFrame* frame) {
  const size_t have = buffer_.size() - start_;
  if (have < sizeof(ShmFrameHeader)) return false;
  ShmFrameHeader h;
  std::memcpy(&h, buffer_.data() + start_, sizeof(h));
  if (h.bytes < sizeof(h) || h.bytes > kMaxShmFrame || h.message_bytes > h.bytes - sizeof(h)) {
    return absl::InvalidArgumentError(absl::StrCat("shared memory: a frame of ", h.bytes,
                                                   " bytes with a message of ", h.message_bytes));
  }
  if (have < h.bytes) return false;
  const char* p = buffer_.data() + start_ + sizeof(h);
  frame->header = h;
  frame->message.assign(p, h.message_bytes);
  frame->body.assign(p + h.message_bytes, h.bytes - sizeof(h) - h.message_bytes);
  start_ += h.bytes;
  if (start_ == buffer_.size()) {
    buffer_.clear();
    start_ = 0;
  } else if (start_ > (64 << 10)) {
    buffer_.erase(0, start_);
    start_ = 0;
  }
  return true;
}

std::string BootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return std::string(absl::StripAsciiWhitespace(id));
}

std::string RandomBytes(size_t n) {
  std::string bytes(n, '\0');
  size_t got = 0;
  while (got < n) {
    const ssize_t r = getrandom(bytes.data() + got, n - got, 0);
    if (r > 0) got += static_cast<size_t>(r);
  }
  return bytes;
}

}  // namespace pstrain
