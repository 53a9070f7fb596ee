// Start-up steps every daemon shares.
#ifndef PSTRAIN_COMMON_DAEMON_H_
#define PSTRAIN_COMMON_DAEMON_H_

#include <string>

#include "absl/status/status.h"

namespace pstrain {

// The address to advertise for a bound "HOST:PORT": a wildcard host
// (0.0.0.0, [::]) becomes this machine's host name.
std::string AdvertisedAddress(const std::string& bound);

// Writes `text` to `path` atomically (a temporary file beside it, then a
// rename): a reader sees the old file or the whole new one.
absl::Status WriteFileAtomically(const std::string& path, const std::string& text);

// Writes `address` and a newline to `path` atomically, for launchers and
// tests that start daemons on port 0.
absl::Status WritePortFile(const std::string& path, const std::string& address);

// Makes SIGINT and SIGTERM set a flag that ShutdownRequested() reads (the
// daemon then stops cleanly) instead of killing the process at once.
void InstallShutdownHandlers();
bool ShutdownRequested();

// Keeps freed message-sized buffers (up to 64 MiB each, 256 MiB in all) in
// the heap for reuse instead of returning them to the kernel: gRPC allocates
// a fresh buffer for every large message, and mapping and faulting in those
// pages again costs more than copying them. Call at start-up, before threads.
void TuneMallocForBulkTraffic();

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_DAEMON_H_
