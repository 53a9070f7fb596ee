// The pieces of the shared-memory data plane both sides use: a segment's
// layout, anonymous sealed segments (memfd), and descriptors passed over
// abstract-namespace Unix sockets (SCM_RIGHTS).
//
// A segment has no name in any file system, so a kill -9 of either side
// leaves nothing behind: its pages go with the last descriptor and mapping.
// Abstract Unix sockets belong to a network namespace, so processes in
// different namespaces (or on different hosts) cannot reach each other's
// and fall back to gRPC.
#ifndef PSTRAIN_COMMON_SHM_H_
#define PSTRAIN_COMMON_SHM_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/partition.h"

namespace pstrain {

// Where each of one server's chunks lies in a segment: a push region (the
// worker writes gradients, the server reads them in place) then a pull
// region (the server writes weights, the worker reads them once). Each
// chunk has a slot of numel x 4 bytes (the widest wire dtype), in ascending
// chunk id, in both regions; worker and server compute it alike.
class ShmLayout {
 public:
  ShmLayout() = default;
  // `chunks`: (chunk id, numel) of one server's chunks, in any order.
  static ShmLayout Make(std::vector<std::pair<int32_t, int64_t>> chunks);
  // Server `server`'s segment of `partition`: every chunk it holds (the
  // worker's and the server's one layout).
  // With standby copies (`standby_copies` 1), the chunks it keeps standby
  // copies of too, which it serves once promoted.
  static ShmLayout OfServer(const Partition& partition, int server, int standby_copies = 0);

  int64_t region_bytes() const { return region_bytes_; }
  int64_t segment_bytes() const { return 2 * region_bytes_; }
  bool Has(int32_t chunk) const { return slots_.contains(chunk); }
  // The chunk's slot in the push region; add region_bytes() for the pull
  // region's. Only for chunks Has().
  int64_t Offset(int32_t chunk) const { return slots_.at(chunk).first; }
  int64_t SlotBytes(int32_t chunk) const { return slots_.at(chunk).second; }

 private:
  absl::flat_hash_map<int32_t, std::pair<int64_t, int64_t>> slots_;  // offset, bytes
  int64_t region_bytes_ = 0;
};

// A shared-memory segment mapped into this process: a memfd sealed against
// shrinking and growing, so that no side can make the other's accesses
// fault. Unmapped and closed on destruction.
class ShmSegment {
 public:
  // A new zeroed segment of `bytes` (the server's side).
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Create(int64_t bytes);
  // Maps a descriptor received from a server (and owns it): refused with
  // FAILED_PRECONDITION unless it is a pstrain memfd of exactly `bytes`,
  // sealed against shrinking and growing.
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Adopt(int fd, int64_t bytes);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // The server's: the newest pull attempt it wrote into the pull region
  // (PullRequest.shm_sequence), and the lock one attempt holds from that
  // check to its last write there, so that an older attempt never writes
  // after a newer one.
  std::atomic<uint64_t> newest_pull{0};
  absl::Mutex pull_mu;

  char* data() const { return data_; }
  int64_t size() const { return size_; }
  int fd() const { return fd_; }

 private:
  ShmSegment(int fd, char* data, int64_t size) : fd_(fd), data_(data), size_(size) {}
  int fd_;
  char* data_;
  int64_t size_;
};

// What a server sends back on its socket for a worker's ticket, with the
// segment's descriptor; id 0 (and no descriptor): refused.
struct ShmGrant {
  uint64_t id = 0;
  int64_t bytes = 0;
};

// The doorbell: once a segment is granted, its socket carries small frames
// instead of gRPC messages for the co-located worker's pushes and pulls
// (their payloads lie in the segment). A frame is this header, then
// `message_bytes` of an error message (replies only), then the body: a
// request's PushRequest / PullRequest bytes as gRPC would carry them, a
// reply's response bytes. A reply echoes its request's `seq`.
struct ShmFrameHeader {
  uint32_t bytes = 0;          // the whole frame's, this header included
  int32_t code = 0;            // a request's method (kShmPush, kShmPull); a reply's status code
  uint64_t seq = 0;            // the request's, unique per worker
  uint32_t message_bytes = 0;  // a reply's error message
  uint32_t reserved = 0;
};
inline constexpr int32_t kShmPush = 1;
inline constexpr int32_t kShmPull = 2;
// A primary server's changes to its standby (ParameterServer.Replicate).
inline constexpr int32_t kShmReplicate = 3;
// Frames are small (the payloads are in the segment): a larger one is a
// peer gone wrong, and its connection is closed.
inline constexpr size_t kMaxShmFrame = 1 << 20;

struct ShmFrame {
  ShmFrameHeader header;
  std::string message;
  std::string body;
};

// The frame's bytes, ready to send in one write.
std::string EncodeFrame(int32_t code, uint64_t seq, std::string_view message,
                        std::string_view body);

// Whole frames out of a stream socket's bytes, as they arrive.
class FrameReader {
 public:
  // Reads what `sock` has now without blocking. UNAVAILABLE: the peer
  // closed the connection (or it failed).
  absl::Status Fill(int sock);
  // Appends bytes read elsewhere (tests).
  void Append(std::string_view bytes) { buffer_.append(bytes); }
  // Takes the next whole frame into *frame: false when none is whole yet.
  // INVALID_ARGUMENT: the bytes are not frames (the caller closes).
  absl::StatusOr<bool> Next(ShmFrame* frame);

 private:
  std::string buffer_;
  size_t start_ = 0;  // of the first frame not taken
};

// An abstract-namespace Unix stream socket listening on `name` (no file;
// gone with the process). Non-blocking, close-on-exec.
absl::StatusOr<int> ListenAbstract(const std::string& name);
// Connects to one (blocking, close-on-exec; reads time out after `timeout`).
absl::StatusOr<int> ConnectAbstract(const std::string& name, absl::Duration timeout);
// Sends `n` bytes with descriptor `fd` attached (-1: none).
absl::Status SendWithFd(int sock, const void* data, size_t n, int fd);
// Receives exactly `n` bytes and the descriptor sent with them (*fd = -1 if
// none; a second one is closed). UNAVAILABLE when the peer closed first.
absl::Status RecvWithFd(int sock, void* data, size_t n, int* fd);
// This host's boot id (/proc/sys/kernel/random/boot_id): equal on both
// sides only when they run under one kernel.
std::string BootId();
// `n` bytes from the kernel's random source.
std::string RandomBytes(size_t n);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_SHM_H_
