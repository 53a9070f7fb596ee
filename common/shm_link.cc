#include "common/shm_link.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/rpc.h"
#include "common/status_macros.h"
#include "proto/ps.grpc.pb.h"

namespace pstrain {
namespace {

constexpr absl::Duration kOpenTimeout = absl::Seconds(5);

}  // namespace

absl::StatusOr<std::unique_ptr<ShmLink>> ShmLink::Open(const std::string& address, int worker_id,
                                                       ShmLayout layout) {
  OpenShmRequest request;
  request.set_worker_id(worker_id);
  request.set_boot_id(BootId());
  OpenShmResponse response;
  std::unique_ptr<ParameterServer::Stub> stub = ParameterServer::NewStub(MakeChannel(address));
  RETURN_IF_ERROR(
      FromGrpc(stub->OpenShm(ContextWithTimeout(kOpenTimeout).get(), request, &response)));
  if (response.segment_bytes() != layout.segment_bytes()) {
    return absl::FailedPreconditionError(
        absl::StrCat("shared memory: the server offers a segment of ", response.segment_bytes(),
                     " bytes, the layout here needs ", layout.segment_bytes()));
  }
  absl::StatusOr<int> connected = ConnectAbstract(response.socket_name(), kOpenTimeout);
  if (!connected.ok()) {
    // Its socket is not in this network namespace: no shared memory with it.
    return absl::FailedPreconditionError(
        absl::StrCat("shared memory: ", connected.status().message(),
                     " (the server is in another network namespace?)"));
  }
  const int sock = *connected;
  ShmGrant grant;
  int fd = -1;
  absl::Status st = SendWithFd(sock, response.ticket().data(), response.ticket().size(), -1);
  if (st.ok()) st = RecvWithFd(sock, &grant, sizeof(grant), &fd);
  if (st.ok() && (grant.id == 0 || fd < 0)) {
    st = absl::UnavailableError("shared memory: the server refused the ticket");
  }
  if (st.ok() && grant.bytes != layout.segment_bytes()) {
    st = absl::FailedPreconditionError(absl::StrCat("shared memory: granted ", grant.bytes,
                                                    " bytes, asked for ", layout.segment_bytes()));
  }
  absl::StatusOr<std::unique_ptr<ShmSegment>> segment =
      st.ok() ? ShmSegment::Adopt(fd, layout.segment_bytes())
              : absl::StatusOr<std::unique_ptr<ShmSegment>>(st);
  if (!st.ok() && fd >= 0) close(fd);
  if (!segment.ok()) {
    close(sock);
    return segment.status();
  }
  return std::unique_ptr<ShmLink>(
      new ShmLink(sock, grant.id, std::move(*segment), std::move(layout)));
}

ShmLink::~ShmLink() { close(sock_); }

absl::Status ShmLink::Ring(int32_t method, uint64_t seq, std::string_view request) {
  const std::string frame = EncodeFrame(method, seq, "", request);
  size_t sent = 0;
  while (sent < frame.size()) {
    const ssize_t n = send(sock_, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::UnavailableError(
          absl::StrCat("shared memory: sending a request: ", std::strerror(errno)));
    }
    sent += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status ShmLink::TakeReplies(const std::function<void(const ShmFrame&)>& take) {
  const absl::Status filled = frames_.Fill(sock_);
  ShmFrame frame;
  while (true) {
    const absl::StatusOr<bool> next = frames_.Next(&frame);
    if (!next.ok()) return next.status();
    if (!*next) break;
    take(frame);
  }
  return filled;
}

}  // namespace pstrain
