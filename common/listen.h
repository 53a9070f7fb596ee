// Where a daemon serves, the one copy of these steps for the scheduler and
// the members: its gRPC server on --listen, announced (the address to
// advertise, written to --port_file for launchers and tests that start
// daemons on port 0), and its HTTP endpoint on --metrics_port beside it.
#ifndef PSTRAIN_COMMON_LISTEN_H_
#define PSTRAIN_COMMON_LISTEN_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/http_server.h"
#include "common/rpc.h"

namespace pstrain {

struct Listening {
  std::unique_ptr<grpc::Server> server;
  std::string address;  // the advertised HOST:PORT (common/daemon.h)
};

// Starts `services` on `listen` ("HOST:PORT", port 0 lets the OS choose)
// and writes the advertised address to `port_file` unless it is empty.
// `bound` (may be empty) is told the address first, so that whoever reads
// the port file finds a daemon that knows its own address.
absl::StatusOr<Listening> ListenAndAnnounce(
    const std::string& listen, const std::string& port_file,
    const std::vector<grpc::Service*>& services, const ServerOptions& options,
    const std::function<void(const std::string& address)>& bound = nullptr);

// Starts an HTTP server on (host, port).
using HttpStart =
    std::function<absl::StatusOr<std::unique_ptr<HttpServer>>(const std::string& host, int port)>;

// Starts the endpoint of --metrics_port=`port` with `start` on the host of
// `listen` (--listen's); an error names the flag. Sets *address to the
// endpoint's advertised HOST:PORT.
absl::StatusOr<std::unique_ptr<HttpServer>> ServeMetricsPort(const std::string& listen, int port,
                                                             const HttpStart& start,
                                                             std::string* address);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_LISTEN_H_
