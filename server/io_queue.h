// Several file reads and writes in flight at once: a transfer is split into
// requests of at most `request_bytes`, which `depth` threads carry out with
// pread/pwrite, so the device sees up to `depth` requests queued (a disk or
// an SSD writes much faster at a queue depth of 8 than one request at a
// time; see docs/offloading.md). Callers block until their transfer is
// done; several callers share the queue (a read-ahead and a write-behind
// then overlap on the device).
//
// A thread pool rather than io_uring: Debian's liburing works, but container
// runtimes' default seccomp profiles refuse io_uring_setup, and a pool of
// blocking calls runs wherever pread does. With O_DIRECT every request is
// then one request to the device.
//
// Thread-safe.
#ifndef PSTRAIN_SERVER_IO_QUEUE_H_
#define PSTRAIN_SERVER_IO_QUEUE_H_

#include <cstdint>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace pstrain {

// `what` and errno `err`'s text, with the code a caller can act on:
// NOT_FOUND, PERMISSION_DENIED, RESOURCE_EXHAUSTED (no space, no memory),
// else INTERNAL.
absl::Status ErrnoStatus(int err, const std::string& what);

struct IoQueueOptions {
  int depth = 8;                      // requests in flight (threads)
  int64_t request_bytes = 4LL << 20;  // the largest request
};

class IoQueue {
 public:
  explicit IoQueue(const IoQueueOptions& options);
  ~IoQueue();
  IoQueue(const IoQueue&) = delete;
  IoQueue& operator=(const IoQueue&) = delete;

  // Reads `n` bytes of `fd` at `offset` into `out` (writes them from `in`),
  // retrying short transfers and EINTR; the first error, naming `path`. With
  // O_DIRECT, `offset`, `n`, the buffer and request_bytes must be
  // page-aligned (the requests start request_bytes apart; the last one is
  // what remains).
  absl::Status Read(int fd, char* out, int64_t n, int64_t offset, const std::string& path);
  absl::Status Write(int fd, const char* in, int64_t n, int64_t offset, const std::string& path);

  const IoQueueOptions& options() const { return options_; }

 private:
  struct Transfer;  // one caller's requests
  struct Request {
    Transfer* transfer;
    char* data;
    int64_t n;
    int64_t offset;
  };
  absl::Status Run(bool write, int fd, char* data, int64_t n, int64_t offset,
                   const std::string& path);
  void Serve();

  const IoQueueOptions options_;
  absl::Mutex mu_;
  std::deque<Request> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_IO_QUEUE_H_
