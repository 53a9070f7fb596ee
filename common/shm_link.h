// A client's shared memory with one parameter server on its host -- a
// worker's, or a primary server's with its standby (server/standby_sender.h)
// (common/shm.h, server/shm_registry.h): the segment the server granted,
// mapped here, and the socket connection that keeps it alive at the
// server. Pushes write gradients into their chunks' slots of the push
// region and name the segment; pulls ask the server to write the weights
// into the pull region's slots and read them from there once. The requests
// themselves may go as frames on the socket (the doorbell, common/shm.h)
// instead of gRPC calls.
#ifndef PSTRAIN_COMMON_SHM_LINK_H_
#define PSTRAIN_COMMON_SHM_LINK_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/shm.h"

namespace pstrain {

class ShmLink {
 public:
  // Asks the server at `address` (OpenShm, over an authenticated channel)
  // for a segment laid out as `layout` and attaches it. FAILED_PRECONDITION:
  // the server is on another host, turned shared memory off, or sent a
  // descriptor that is not a pstrain segment of the agreed size; UNAVAILABLE:
  // its socket cannot be reached (another network namespace) or it refused
  // the ticket. Any error: the payloads go in the messages instead.
  static absl::StatusOr<std::unique_ptr<ShmLink>> Open(const std::string& address, int worker_id,
                                                       ShmLayout layout);
  // Closes the connection: the server drops its side of the segment.
  ~ShmLink();
  ShmLink(const ShmLink&) = delete;
  ShmLink& operator=(const ShmLink&) = delete;

  uint64_t id() const { return id_; }
  const ShmLayout& layout() const { return layout_; }
  // A chunk's slot in the push region (gradients) and in the pull region
  // (weights); only for chunks of the layout.
  char* PushSlot(int32_t chunk) const { return segment_->data() + layout_.Offset(chunk); }
  const char* PullSlot(int32_t chunk) const {
    return segment_->data() + layout_.region_bytes() + layout_.Offset(chunk);
  }

  // The doorbell. Sends a request frame (kShmPush or kShmPull, the
  // request's bytes); UNAVAILABLE when the socket failed.
  absl::Status Ring(int32_t method, uint64_t seq, std::string_view request);
  // The socket, to wait on (readable: answers came).
  int fd() const { return sock_; }
  // Reads the answers that came and hands each whole one to `take`.
  // UNAVAILABLE: the server closed the connection (it exited, or dropped
  // the segment); INVALID_ARGUMENT: it sent something other than frames.
  absl::Status TakeReplies(const std::function<void(const ShmFrame&)>& take);

 private:
  ShmLink(int sock, uint64_t id, std::unique_ptr<ShmSegment> segment, ShmLayout layout)
      : sock_(sock), id_(id), segment_(std::move(segment)), layout_(std::move(layout)) {}
  const int sock_;
  const uint64_t id_;
  const std::unique_ptr<ShmSegment> segment_;
  const ShmLayout layout_;
  FrameReader frames_;
};

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_SHM_LINK_H_
