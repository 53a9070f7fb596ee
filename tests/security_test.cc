// Refusing strangers: with a token configured every method of every service
// refuses calls without it (or with a wrong one) while the daemons talk to
// each other; with TLS configured a plaintext call fails and the job still
// runs over TLS.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/rpc.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "proto/cluster.grpc.pb.h"
#include "proto/ps.grpc.pb.h"
#include "proto/worker.grpc.pb.h"
#include "tests/cluster.h"
#include "tests/prometheus_parser.h"
#include "tests/test_jobs.h"

namespace pstrain {
namespace testing {
namespace {

constexpr char kToken[] = "s3cret-token-for-tests";

// A raw call of `method` ("/pstrain.Scheduler/Status") with an empty
// request, carrying `bearer` as its authorization unless empty.
grpc::Status Call(const std::string& address, const std::string& method,
                  const std::string& bearer) {
  grpc::GenericStub stub(MakeChannel(address));
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1), reply;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  if (!bearer.empty()) ctx.AddMetadata("authorization", bearer);
  absl::Notification done;
  grpc::Status status;
  stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &reply, [&](grpc::Status s) {
    status = s;
    done.Notify();
  });
  done.WaitForNotification();
  return status;
}

// Every method of the named services, as "/service/method".
std::vector<std::string> Methods(const std::string& service) {
  // (Naming the services links their descriptors in.)
  static const char* const kLinked[] = {Scheduler::service_full_name(),
                                        ParameterServer::service_full_name(),
                                        Worker::service_full_name()};
  (void)kLinked;
  const google::protobuf::ServiceDescriptor* d =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(service);
  std::vector<std::string> out;
  for (int i = 0; d != nullptr && i < d->method_count(); ++i) {
    out.push_back(absl::StrCat("/", service, "/", d->method(i)->name()));
  }
  return out;
}

TEST(SecurityTest, EveryMethodOfEveryServiceRefusesCallsWithoutTheToken) {
  Cluster cluster("token");
  const std::string token_file = cluster.dir() + "/token";
  WriteFile(token_file, absl::StrCat(kToken, "\n"));
  const std::string flag = "--auth_token_file=" + token_file;
  ClusterOptions options;
  options.job_text = SmallJob("batch_size: 16\nsteps: 60\n");
  options.servers = 1;
  options.workers = 1;
  options.scheduler_flags = {flag, "--metrics_port=0"};
  options.server_flags = {flag, "--metrics_port=0"};
  options.worker_flags = {{flag, "--debug_slowdown_ms=50"}};
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.Logs();
  const std::string bearer = absl::StrCat("Bearer ", kToken);
  std::vector<std::string> http;  // the scheduler's and the server's HTTP endpoints

  // The members' addresses, from the scheduler (with the token).
  // (A member's metrics address reaches the scheduler with its heartbeats.)
  std::string server_address, worker_address;
  auto known = [&] {
    return !server_address.empty() && !worker_address.empty() && http.size() == 2 &&
           !http[0].empty() && !http[1].empty();
  };
  for (int i = 0; i < 200 && !known(); ++i) {
    auto stub = Scheduler::NewStub(MakeChannel(cluster.scheduler_address()));
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", bearer);
    ClusterStatus st;
    if (stub->Status(&ctx, StatusRequest(), &st).ok()) {
      server_address.clear();
      worker_address.clear();
      http = {st.scheduler().metrics_address()};
      for (const NodeStatus& m : st.members()) {
        if (m.role() == SERVER) server_address = m.address();
        if (m.role() == SERVER) http.push_back(m.metrics_address());
        if (m.role() == WORKER) worker_address = m.address();
      }
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_TRUE(known()) << cluster.Logs();

  // /metrics, the dashboard and its data refuse HTTP requests without the
  // token (401), and answer with it, in a header or as ?token=.
  ASSERT_EQ(http.size(), 2u);
  for (const std::string& address : http) {
    ASSERT_FALSE(address.empty()) << cluster.Logs();
    const bool scheduler = address == http[0];
    for (const std::string path : {"/metrics", "/", "/api/status"}) {
      if (!scheduler && path != "/metrics") continue;
      EXPECT_EQ(HttpGet(address, path)->code, 401) << address << path;
      EXPECT_EQ(HttpGet(address, path, {"Authorization: Bearer nope"})->code, 401) << path;
      EXPECT_EQ(HttpGet(address, path + "?token=nope")->code, 401) << path;
      EXPECT_EQ(HttpGet(address, path, {"Authorization: " + bearer})->code, 200) << path;
      EXPECT_EQ(HttpGet(address, path + "?token=" + kToken)->code, 200) << path;
    }
  }

  const std::vector<std::pair<std::string, std::string>> services = {
      {"pstrain.Scheduler", cluster.scheduler_address()},
      {"pstrain.ParameterServer", server_address},
      {"pstrain.Worker", worker_address}};
  int checked = 0;
  for (const auto& [service, address] : services) {
    const std::vector<std::string> methods = Methods(service);
    ASSERT_FALSE(methods.empty()) << service;
    for (const std::string& method : methods) {
      for (const std::string& wrong : {std::string(), std::string("Bearer nope"),
                                       absl::StrCat("Bearer ", kToken, "x"), std::string(kToken)}) {
        const grpc::Status st = Call(address, method, wrong);
        EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED)
            << method << " with \"" << wrong << "\": " << st.error_message();
        ++checked;
      }
    }
    // With the token the door opens (Status answers).
    EXPECT_TRUE(Call(address, absl::StrCat("/", service, "/Status"), bearer).ok()) << service;
  }
  EXPECT_EQ(checked, 4 * (6 + 3 + 1));  // scheduler, server, worker methods
  // The daemons, which all have the token, finish the job.
  absl::StatusOr<int> code = cluster.WaitAll(absl::Seconds(120));
  ASSERT_TRUE(code.ok()) << code.status() << cluster.Logs();
  EXPECT_EQ(*code, 0) << cluster.Logs();
}

TEST(SecurityTest, WithTlsAPlaintextCallFailsAndTheJobRunsOverTls) {
  Cluster cluster("tls");
  const std::string certs = cluster.dir() + "/certs";
  std::string out;
  ASSERT_EQ(
      RunCommand({BinaryPath("deploy/make_dev_certs.sh"), certs}, &out, absl::Seconds(60), "certs")
          .value_or(-1),
      0)
      << out;
  const std::vector<std::string> tls = {"--tls_cert=" + certs + "/node.pem",
                                        "--tls_key=" + certs + "/node.key",
                                        "--tls_ca=" + certs + "/ca.pem"};
  ClusterOptions options;
  options.job_text = SmallJob("batch_size: 16\nsteps: 40\n");
  options.servers = 1;
  options.workers = 1;
  options.scheduler_flags = tls;
  options.server_flags = tls;
  std::vector<std::string> worker = tls;
  worker.push_back("--debug_slowdown_ms=50");
  options.worker_flags = {worker};
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.Logs();
  // This process has no TLS: its plaintext call cannot get through.
  const grpc::Status plain = Call(cluster.scheduler_address(), "/pstrain.Scheduler/Status", "");
  EXPECT_FALSE(plain.ok());
  EXPECT_EQ(plain.error_code(), grpc::StatusCode::UNAVAILABLE) << plain.error_message();
  // psctl with the certificates gets through.
  std::vector<std::string> psctl = {BinaryPath("tools/psctl")};
  psctl.insert(psctl.end(), tls.begin(), tls.end());
  psctl.push_back("--scheduler=" + cluster.scheduler_address());
  psctl.push_back("status");
  EXPECT_EQ(RunCommand(psctl, &out, absl::Seconds(20), "psctl").value_or(-1), 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "scheduler")) << out;
  absl::StatusOr<int> code = cluster.WaitAll(absl::Seconds(120));
  ASSERT_TRUE(code.ok()) << code.status() << cluster.Logs();
  EXPECT_EQ(*code, 0) << cluster.Logs();
}

TEST(SecurityTest, BadSecurityFlagsExitTwoNamingTheProblem) {
  std::string out;
  EXPECT_EQ(RunCommand({BinaryPath("scheduler/ps_scheduler"), "--auth_token_file=/nonexistent/t"},
                       &out, absl::Seconds(20), "sched")
                .value_or(-1),
            2);
  EXPECT_TRUE(absl::StrContains(out, "--auth_token_file=/nonexistent/t: cannot open")) << out;
  EXPECT_EQ(RunCommand({BinaryPath("server/ps_server"), "--scheduler=127.0.0.1:1",
                        "--tls_cert=/nonexistent/c.pem"},
                       &out, absl::Seconds(20), "server")
                .value_or(-1),
            2);
  EXPECT_TRUE(absl::StrContains(out, "--tls_cert and --tls_key go together")) << out;
}

}  // namespace
}  // namespace testing
}  // namespace pstrain
