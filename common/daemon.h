// Start-up steps every daemon shares.
#ifndef PSTRAIN_COMMON_DAEMON_H_
#define PSTRAIN_COMMON_DAEMON_H_

#include <string>

namespace pstrain {

// The address to advertise for a bound "HOST:PORT": a wildcard host
// (0.0.0.0, [::]) becomes this machine's host name.
std::string AdvertisedAddress(const std::string& bound);

// Makes SIGINT and SIGTERM set a flag that ShutdownRequested() reads (the
// daemon then stops cleanly) instead of killing the process at once.
void InstallShutdownHandlers();
bool ShutdownRequested();

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_DAEMON_H_
