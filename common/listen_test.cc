// The announcement launchers and tests rely on: the port file holds the
// advertised address of the server that was started, and a failed start
// writes none; a --metrics_port that cannot be served is named.
#include "common/listen.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "common/daemon.h"
#include "gtest/gtest.h"
#include "proto/cluster.grpc.pb.h"

ABSL_DECLARE_FLAG(std::string, advertise_host);

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

// A server on every interface advertises --advertise_host when set (an
// IPv6 address in brackets), else this machine's host name.
TEST(ListenTest, AWildcardHostAdvertisesTheAdvertiseHost) {
  absl::FlagSaver saver;
  EXPECT_EQ(AdvertisedAddress("127.0.0.1:7001"), "127.0.0.1:7001");
  EXPECT_FALSE(absl::StartsWith(AdvertisedAddress("0.0.0.0:7001"), "0.0.0.0"));
  absl::SetFlag(&FLAGS_advertise_host, "10.1.2.3");
  EXPECT_EQ(AdvertisedAddress("0.0.0.0:7001"), "10.1.2.3:7001");
  EXPECT_EQ(AdvertisedAddress("[::]:7001"), "10.1.2.3:7001");
  EXPECT_EQ(AdvertisedAddress("127.0.0.1:7001"), "127.0.0.1:7001");  // a host given stays
  absl::SetFlag(&FLAGS_advertise_host, "fd00::5");
  EXPECT_EQ(AdvertisedAddress("0.0.0.0:7001"), "[fd00::5]:7001");
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
