#include "server/io_queue.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace pstrain {

absl::Status ErrnoStatus(int err, const std::string& what) {
  const std::string message = absl::StrCat(what, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(message);
    case ENOSPC:
    case EDQUOT:
    case ENOMEM:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

namespace {

// One whole request, retried over short transfers and EINTR.
absl::Status Whole(bool write, int fd, char* data, int64_t n, int64_t offset,
                   const std::string& path) {
  while (n > 0) {
    const ssize_t done = write ? pwrite(fd, data, static_cast<size_t>(n), offset)
                               : pread(fd, data, static_cast<size_t>(n), offset);
    if (done < 0 && errno == EINTR) continue;
    if (done < 0) {
      return ErrnoStatus(errno, absl::StrCat(write ? "cannot write " : "cannot read ", path));
    }
    if (done == 0 && !write) return absl::DataLossError(absl::StrCat(path, " ends early"));
    if (done == 0)
      return absl::InternalError(absl::StrCat("cannot write ", path, ": wrote nothing"));
    data += done;
    n -= done;
    offset += done;
  }
  return absl::OkStatus();
}

}  // namespace

struct IoQueue::Transfer {
  bool write = false;
  int fd = -1;
  const std::string* path = nullptr;
  int pending = 0;      // requests not yet done (IoQueue::mu_)
  absl::Status status;  // the first error (IoQueue::mu_)
};

IoQueue::IoQueue(const IoQueueOptions& options) : options_(options) {
  for (int i = 0; i < std::max(1, options_.depth); ++i) threads_.emplace_back([this] { Serve(); });
}

IoQueue::~IoQueue() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

absl::Status IoQueue::Read(int fd, char* out, int64_t n, int64_t offset, const std::string& path) {
  return Run(/*write=*/false, fd, out, n, offset, path);
}

absl::Status IoQueue::Write(int fd, const char* in, int64_t n, int64_t offset,
                            const std::string& path) {
  // pwrite takes a const buffer; Run hands it on unchanged.
  return Run(/*write=*/true, fd, const_cast<char*>(in), n, offset, path);
}

absl::Status IoQueue::Run(bool write, int fd, char* data, int64_t n, int64_t offset,
                          const std::string& path) {
  Transfer t;
  t.write = write;
  t.fd = fd;
  t.path = &path;
  const int64_t step = std::max<int64_t>(1, options_.request_bytes);
  absl::MutexLock lock(&mu_);
  for (int64_t done = 0; done < n; done += step) {
    queue_.push_back(Request{&t, data + done, std::min(step, n - done), offset + done});
    ++t.pending;
  }
  auto finished = [&t]() { return t.pending == 0; };
  mu_.Await(absl::Condition(&finished));
  return t.status;
}

void IoQueue::Serve() {
  absl::MutexLock lock(&mu_);
  for (;;) {
    auto work = [this]()
                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); };
    mu_.Await(absl::Condition(&work));
    if (queue_.empty()) return;  // stopping, and every caller served
    const Request r = queue_.front();
    queue_.pop_front();
    Transfer& t = *r.transfer;
    absl::Status st = absl::OkStatus();
    if (t.status.ok()) {  // after a failed request, the rest of its transfer is moot
      mu_.Unlock();
      st = Whole(t.write, t.fd, r.data, r.n, r.offset, *t.path);
      mu_.Lock();
    }
    if (!st.ok() && t.status.ok()) t.status = st;
    --t.pending;
  }
}

}  // namespace pstrain
