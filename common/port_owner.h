// Who listens on a TCP port of this host: for the error of a daemon that
// cannot bind its --listen port (gRPC servers do not share ports: see
// StartServer in common/rpc.h). Reads /proc (Linux); only the processes
// this one may inspect are found.
#ifndef PSTRAIN_COMMON_PORT_OWNER_H_
#define PSTRAIN_COMMON_PORT_OWNER_H_

#include <string>

namespace pstrain {

// "pid 1234 (ps_scheduler --listen=127.0.0.1:5000 ...)" for a process with
// a listening TCP socket (IPv4 or IPv6) on `port` that a bind of `host`
// (numeric, a name, or empty for any) meets: bound to the same address or
// a wildcard. Empty when none is found.
std::string PortOwner(const std::string& host, int port);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_PORT_OWNER_H_
