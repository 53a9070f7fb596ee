// The announcement launchers and tests rely on: the port file holds the
// advertised address of the server that was started, and a failed start
// writes none; a --metrics_port that cannot be served is named.
#include "common/listen.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "proto/cluster.grpc.pb.h"

namespace pstrain {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ListenTest, ThePortFileHoldsTheAdvertisedAddressOfThePortBound) {
  const std::string port_file = TempPath("listen.port");
  Scheduler::CallbackService service;  // every method unimplemented: only the port matters
  absl::StatusOr<Listening> l =
      ListenAndAnnounce("127.0.0.1:0", port_file, {&service}, ServerOptions());
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_TRUE(absl::StartsWith(l->address, "127.0.0.1:")) << l->address;
  EXPECT_NE(l->address, "127.0.0.1:0");
  EXPECT_EQ(Read(port_file), l->address + "\n");
  l->server->Shutdown();
}

TEST(ListenTest, AFailedStartWritesNoPortFile) {
  const std::string port_file = TempPath("failed.port");
  Scheduler::CallbackService service;
  absl::StatusOr<Listening> l =
      ListenAndAnnounce("256.0.0.1:0", port_file, {&service}, ServerOptions());
  EXPECT_FALSE(l.ok());
  EXPECT_FALSE(std::ifstream(port_file).good());
}

TEST(ListenTest, AMetricsPortThatCannotBeServedIsNamed) {
  std::string address = "unchanged";
  std::string host_asked;
  const HttpStart refuse = [&](const std::string& host, int) {
    host_asked = host;
    return absl::StatusOr<std::unique_ptr<HttpServer>>(absl::UnavailableError("in use"));
  };
  absl::StatusOr<std::unique_ptr<HttpServer>> http =
      ServeMetricsPort("[::1]:7000", 9100, refuse, &address);
  EXPECT_TRUE(absl::IsUnavailable(http.status())) << http.status();
  EXPECT_EQ(http.status().message(), "--metrics_port=9100: in use");
  EXPECT_EQ(host_asked, "::1");  // --listen's host
  EXPECT_EQ(address, "unchanged");
}

}  // namespace
}  // namespace pstrain
