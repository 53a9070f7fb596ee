#include "common/listen.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/daemon.h"

namespace pstrain {

absl::StatusOr<Listening> ListenAndAnnounce(
    const std::string& listen, const std::string& port_file,
    const std::vector<grpc::Service*>& services, const ServerOptions& options,
    const std::function<void(const std::string& address)>& bound) {
  std::string bound_to;
  absl::StatusOr<std::unique_ptr<grpc::Server>> server =
      StartServer(listen, services, &bound_to, options);
  if (!server.ok()) return server.status();
  Listening out{std::move(*server), AdvertisedAddress(bound_to)};
  if (bound) bound(out.address);
  if (!port_file.empty()) {
    if (const absl::Status st = WritePortFile(port_file, out.address); !st.ok()) return st;
  }
  return out;
}

absl::StatusOr<std::unique_ptr<HttpServer>> ServeMetricsPort(const std::string& listen, int port,
                                                             const HttpStart& start,
                                                             std::string* address) {
  absl::StatusOr<std::unique_ptr<HttpServer>> http = start(HostOf(listen), port);
  if (!http.ok()) {
    return absl::Status(http.status().code(),
                        absl::StrCat("--metrics_port=", port, ": ", http.status().message()));
  }
  *address =
      AdvertisedAddress(absl::StrCat(HostForAddress(HostOf(listen)), ":", (*http)->port()));
  return http;
}

}  // namespace pstrain
