// Start-up steps every daemon shares.
#ifndef PSTRAIN_COMMON_DAEMON_H_
#define PSTRAIN_COMMON_DAEMON_H_

#include <cstdint>
#include <functional>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"

namespace pstrain {

// The address to advertise for a bound "HOST:PORT": a wildcard host
// (0.0.0.0, [::]) becomes --advertise_host, or by default this machine's
// host name.
std::string AdvertisedAddress(const std::string& bound);

// Writes `text` to `path` atomically (a temporary file beside it, then a
// rename): a reader sees the old file or the whole new one.
absl::Status WriteFileAtomically(const std::string& path, const std::string& text);

// The same, durably: the temporary file is fsynced before the rename and the
// folder after it, so that after a crash the path holds the old bytes or
// the new ones (manifests, the scheduler's state file).
absl::Status WriteFileDurably(const std::string& path, const std::string& bytes);

// Writes `address` and a newline to `path` atomically, for launchers and
// tests that start daemons on port 0.
absl::Status WritePortFile(const std::string& path, const std::string& address);

// Makes SIGINT and SIGTERM set a flag that ShutdownRequested() reads (the
// daemon then stops cleanly) instead of killing the process at once.
void InstallShutdownHandlers();
bool ShutdownRequested();

// Makes an exception that nothing caught exit 1 with "out of memory" on
// stderr when it is a failed allocation (std::bad_alloc, on any thread),
// instead of aborting (exit 134); other ones abort as before. The last
// resort behind OutOfMemoryAsError.
void InstallOutOfMemoryExit();
// What the process does first when a failed allocation ends it (above): a
// member tells the scheduler it failed, out of memory, so that the job's
// reason says so instead of a missed heartbeat. Called at most once, on
// the failing thread; best effort (it may fail to allocate too; 3 s at
// most). A later call replaces the report; an empty one removes it (and
// waits, while a report runs, for the process to end).
void SetOutOfMemoryReport(std::function<void()> report);

// Runs `f` (returning an absl::Status or StatusOr); a failed allocation in
// it becomes RESOURCE_EXHAUSTED "out of memory <what>".
template <typename F>
auto OutOfMemoryAsError(const std::string& what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory " + what);
  } catch (const std::length_error& e) {  // a size no container holds
    return absl::ResourceExhaustedError("out of memory " + what + " (" + e.what() + ")");
  }
}

// Keeps freed message-sized buffers (up to 64 MiB each, 256 MiB in all) in
// the heap for reuse instead of returning them to the kernel: gRPC allocates
// a fresh buffer for every large message, and mapping and faulting in those
// pages again costs more than copying them. Call at start-up, before threads.
void TuneMallocForBulkTraffic();

// For a process whose memory must stay within a bound (an offloaded
// server): one malloc arena, so that memory freed by one thread serves the
// next allocation of any other instead of sitting in a per-thread arena,
// and freed memory at the heap's top above 1 MiB goes back to the kernel.
// Measured on an offloaded server (bench/offload_memory.sh): the default
// arenas held ~50 MB free beside ~10 MB in use. Call at start-up, before
// threads.
void TuneMallocForBoundedMemory();

// Gives freed heap memory back to the kernel (malloc_trim) once a second
// while `refused()` -- a count of requests refused as malformed -- moves,
// and once more after it stopped: a flood of refused requests leaves
// nothing behind, while steady traffic keeps the buffers
// TuneMallocForBulkTraffic holds for it. Stops with the object.
class MemoryGiveBack {
 public:
  explicit MemoryGiveBack(std::function<int64_t()> refused);
  ~MemoryGiveBack();
  MemoryGiveBack(const MemoryGiveBack&) = delete;
  MemoryGiveBack& operator=(const MemoryGiveBack&) = delete;

 private:
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_DAEMON_H_
