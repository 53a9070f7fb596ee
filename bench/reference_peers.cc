#include "bench/reference_peers.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench.grpc.pb.h"
#include "common/rpc.h"
#include "grpcpp/grpcpp.h"

namespace pstrain {
namespace {

// In a forked child: SIGKILL when `parent` goes. Orphans are not always
// reparented to PID 1 (a subreaper, a PID namespace), and a peer that
// outlived the bench would hold its stdout open.
void DieWithParent(pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(0);  // it went before prctl
}

// The child: answers TcpHeaders on one connection until told to quit.
void TcpSink(int listen_fd, size_t max_bytes) {
  const int fd = accept(listen_fd, nullptr, nullptr);
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  std::vector<char> buf(max_bytes, 'x');
  TcpHeader h;
  while (ReadAll(fd, reinterpret_cast<char*>(&h), sizeof(h)) && h.mode != 3) {
    if (h.bytes > max_bytes) break;
    bool ok = true;
    if (h.mode == 0) ok = ReadAll(fd, buf.data(), h.bytes) && WriteAll(fd, "k", 1);
    if (h.mode == 1) ok = WriteAll(fd, buf.data(), h.bytes);
    if (h.mode == 2) ok = ReadAll(fd, buf.data(), h.bytes) && WriteAll(fd, buf.data(), h.bytes);
    if (!ok) break;
  }
  _exit(0);
}

class EchoService final : public bench::Echo::Service {
 public:
  explicit EchoService(size_t max_bytes) : source_(max_bytes, 'y') {}
  grpc::Status Push(grpc::ServerContext*, const bench::Blob*, bench::Blob*) override {
    return grpc::Status::OK;
  }
  grpc::Status Pull(grpc::ServerContext*, const bench::Blob* req, bench::Blob* resp) override {
    if (req->size() < 0 || static_cast<size_t>(req->size()) > source_.size()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "size");
    }
    resp->set_data(source_.data(), req->size());
    return grpc::Status::OK;
  }
  grpc::Status PushPull(grpc::ServerContext*, const bench::Blob* req, bench::Blob* resp) override {
    resp->set_data(req->data());
    return grpc::Status::OK;
  }

 private:
  const std::string source_;
};

}  // namespace

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t k = write(fd, p, n);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

bool ReadAll(int fd, char* p, size_t n) {
  while (n > 0) {
    const ssize_t k = read(fd, p, n);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

// Forks the TCP child; returns a connected socket.
int StartTcpPeer(size_t max_bytes) {
  const int listen_fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(listen_fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(listen_fd, 1) != 0 ||
      getsockname(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("reference peer: tcp listen");
    std::exit(1);
  }
  const pid_t parent = getpid();
  if (fork() == 0) {
    DieWithParent(parent);
    TcpSink(listen_fd, max_bytes);
  }
  close(listen_fd);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    std::perror("reference peer: tcp connect");
    std::exit(1);
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

// Forks a child serving EchoService with default settings (but the message
// size limits); returns its address. Call before this process uses gRPC.
std::string StartGrpcPeer(size_t max_bytes) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) std::exit(1);
  const pid_t parent = getpid();
  if (fork() == 0) {
    DieWithParent(parent);
    close(pipe_fds[0]);
    EchoService service(max_bytes);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
    builder.SetMaxSendMessageSize(kMaxMessageBytes);
    builder.RegisterService(&service);
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    const std::string address = absl::StrCat("127.0.0.1:", port);
    WriteAll(pipe_fds[1], address.data(), address.size());
    close(pipe_fds[1]);
    // Serve until the parent goes away (the signal, or this).
    while (getppid() == parent) sleep(1);
    _exit(0);
  }
  close(pipe_fds[1]);
  char buf[64] = {0};
  const ssize_t n = read(pipe_fds[0], buf, sizeof(buf) - 1);
  close(pipe_fds[0]);
  if (n <= 0) std::exit(1);
  return std::string(buf, n);
}

}  // namespace pstrain
