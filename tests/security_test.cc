// Refusing strangers: with a token configured every method of every service
// in proto/ (the stage links included) refuses calls without it (or with a
// wrong one), with no effect on the job, while the daemons talk to each
// other; with TLS configured a plaintext call fails and the job still
// runs over TLS.
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/rpc.h"
#include "common/status_macros.h"
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

// Adds `bearer` as the call's authorization (unless empty) and metadata
// a stage link's neighbour sends (the link generation of its link).
void AddMetadata(grpc::ClientContext* ctx, const std::string& bearer, int link_generation) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  if (!bearer.empty()) ctx->AddMetadata("authorization", bearer);
  ctx->AddMetadata("pstrain-link-generation", absl::StrCat(link_generation));
}

// A raw unary call of `method` ("/pstrain.Scheduler/Status") with an empty
// request.
grpc::Status Call(const std::string& address, const std::string& method, const std::string& bearer,
                  int link_generation = 0) {
  grpc::GenericStub stub(MakeChannel(address));
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1), reply;
  grpc::ClientContext ctx;
  AddMetadata(&ctx, bearer, link_generation);
  absl::Notification done;
  grpc::Status status;
  stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &reply, [&](grpc::Status s) {
    status = s;
    done.Notify();
  });
  done.WaitForNotification();
  return status;
}

// A raw streaming call of `method`: one empty message each way at most.
grpc::Status StreamCall(const std::string& address, const std::string& method,
                        const std::string& bearer, int link_generation) {
  grpc::GenericStub stub(MakeChannel(address));
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  AddMetadata(&ctx, bearer, link_generation);
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call = stub.PrepareCall(&ctx, method, &cq);
  void* tag;
  bool ok;
  auto step = [&](int want) { return cq.Next(&tag, &ok) && tag == reinterpret_cast<void*>(want); };
  call->StartCall(reinterpret_cast<void*>(1));
  step(1);
  grpc::Slice empty("");
  grpc::ByteBuffer message(&empty, 1), reply;
  call->Write(message, reinterpret_cast<void*>(2));
  step(2);
  call->Read(&reply, reinterpret_cast<void*>(3));
  step(3);
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(4));
  step(4);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return status;
}

// The scheduler's Status, asked with the token.
absl::StatusOr<ClusterStatus> StatusWithToken(const std::string& address,
                                              const std::string& bearer) {
  auto stub = Scheduler::NewStub(MakeChannel(address));
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", bearer);
  ClusterStatus st;
  RETURN_IF_ERROR(FromGrpc(stub->Status(&ctx, StatusRequest(), &st)));
  return st;
}

// Whether the .proto file at `path` declares a service (a line that starts
// with "service ").
bool DeclaresService(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "service ")) return true;
  }
  return false;
}

// Every service declared in a .proto file of proto/ (read from the folder:
// a file that declares one and whose code the test does not link fails the
// test; files without a service -- the scheduler's private state among
// them -- need not be linked).
std::vector<const google::protobuf::ServiceDescriptor*> ProtoServices() {
  std::vector<const google::protobuf::ServiceDescriptor*> out;
  for (const auto& entry : std::filesystem::directory_iterator(BinaryPath("proto"))) {
    if (entry.path().extension() != ".proto") continue;
    const std::string name = "proto/" + entry.path().filename().string();
    const google::protobuf::FileDescriptor* file =
        google::protobuf::DescriptorPool::generated_pool()->FindFileByName(name);
    if (file == nullptr && !DeclaresService(entry.path())) continue;
    EXPECT_NE(file, nullptr) << name << " declares a service but is not linked into the test: "
                             << "add its proto library";
    for (int i = 0; file != nullptr && i < file->service_count(); ++i) {
      out.push_back(file->service(i));
    }
  }
  return out;
}

// How many methods the service of that full name has (0: none such).
int MethodsOf(const std::string& service) {
  const google::protobuf::ServiceDescriptor* d =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(service);
  EXPECT_NE(d, nullptr) << service;
  return d == nullptr ? 0 : d->method_count();
}

// The addresses of the members serving each service, by its full name.
using Servers = std::map<std::string, std::vector<std::string>>;

Servers ServersOf(const ClusterStatus& st) {
  Servers out = {{Scheduler::service_full_name(), {st.scheduler().address()}}};
  for (const MemberStatus& m : st.members()) {
    if (m.role() == SERVER) out[ParameterServer::service_full_name()].push_back(m.address());
    if (m.role() != WORKER) continue;
    out[Worker::service_full_name()].push_back(m.address());
    out[StageLink::service_full_name()].push_back(m.address());
  }
  return out;
}

// Calls every method of every service on every member serving it without
// the token and with wrong ones; every call must be UNAUTHENTICATED. The
// number of calls made.
int CallEveryMethodWithoutTheToken(const Servers& servers) {
  int calls = 0;
  for (const google::protobuf::ServiceDescriptor* service : ProtoServices()) {
    const auto at = servers.find(service->full_name());
    if (at == servers.end()) {
      ADD_FAILURE() << service->full_name() << ": no member known to serve it (add it here)";
      continue;
    }
    for (const std::string& address : at->second) {
      for (int i = 0; i < service->method_count(); ++i) {
        const google::protobuf::MethodDescriptor* m = service->method(i);
        const std::string method = absl::StrCat("/", service->full_name(), "/", m->name());
        const bool stream = m->client_streaming() || m->server_streaming();
        for (const std::string& wrong :
             {std::string(), std::string("Bearer nope"), absl::StrCat("Bearer ", kToken, "x"),
              std::string(kToken)}) {
          for (int generation = 0; generation < (stream ? 3 : 1); ++generation) {
            const grpc::Status st = stream ? StreamCall(address, method, wrong, generation)
                                           : Call(address, method, wrong);
            EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED)
                << method << " at " << address << " with \"" << wrong
                << "\": " << st.error_message();
            ++calls;
          }
        }
      }
    }
  }
  return calls;
}

// Two pipeline replicas of two stages each (1 server), slowed so that the
// calls below land while they train.
ClusterOptions PipelinedJob(const std::string& flag) {
  ClusterOptions options;
  options.job_text = R"pb(
    name: "token"
    model {
      layers { type: DENSE units: 16 }
      layers { type: RELU }
      layers { type: DENSE units: 4 }
      layers { type: SOFTMAX_XENT }
    }
    data { dataset: SYNTHETIC synthetic_dim: 16 synthetic_classes: 4 synthetic_test_size: 64 }
    optimizer { type: SGD learning_rate: 0.1 }
    batch_size: 16
    clocks: 400
    num_workers: 4
    pipeline_stages: 2
    chunk_bytes: 1024
  )pb";
  options.servers = 1;
  options.workers = 4;
  options.scheduler_flags = {flag, "--metrics_port=0"};
  options.server_flags = {flag, "--metrics_port=0"};
  for (int i = 0; i < 4; ++i) options.worker_flags.push_back({flag, "--straggler=fixed:25"});
  return options;
}

TEST(SecurityTest, EveryMethodOfEveryServiceRefusesCallsWithoutTheToken) {
  Cluster cluster("token");
  const std::string token_file = cluster.dir() + "/token";
  WriteFile(token_file, absl::StrCat(kToken, "\n"));
  ASSERT_TRUE(cluster.Start(PipelinedJob("--auth_token_file=" + token_file)).ok())
      << cluster.Logs();
  const std::string bearer = absl::StrCat("Bearer ", kToken);

  // The members' addresses (and HTTP endpoints) from the scheduler, asked
  // with the token, once all four workers train (a member's metrics address
  // reaches the scheduler with its heartbeats).
  ClusterStatus status;
  auto known = [&] {
    absl::StatusOr<ClusterStatus> st = StatusWithToken(cluster.scheduler_address(), bearer);
    if (!st.ok() || st->members_size() != 5 || st->scheduler().metrics_address().empty()) {
      return false;
    }
    for (const MemberStatus& m : st->members()) {
      if (m.role() == SERVER && m.metrics_address().empty()) return false;
      if (m.role() == WORKER && m.clock() < 1) return false;
    }
    status = *st;
    return true;
  };
  for (int i = 0; i < 400 && !known(); ++i) absl::SleepFor(absl::Milliseconds(50));
  ASSERT_EQ(status.members_size(), 5) << cluster.Logs();

  // /metrics, the dashboard and its data refuse HTTP requests without the
  // token (401), and answer with it, in a header or as ?token=.
  std::vector<std::string> http = {status.scheduler().metrics_address()};
  for (const MemberStatus& m : status.members()) {
    if (m.role() == SERVER) http.push_back(m.metrics_address());
  }
  for (const std::string& address : http) {
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

  // Every method of every service in proto/, on every member serving it:
  // 4 wrong tokens each, 3 link generations for a stream.
  const Servers servers = ServersOf(status);
  const int calls = CallEveryMethodWithoutTheToken(servers);
  // 4 wrong tokens on the scheduler, the server, 4 workers and 4 stage links
  // (3 link generations each).
  EXPECT_EQ(calls, 4 * (MethodsOf("pstrain.Scheduler") + MethodsOf("pstrain.ParameterServer") +
                        4 * MethodsOf("pstrain.Worker") + 4 * 3 * MethodsOf("pstrain.StageLink")));
  // With the token the door opens (Status answers).
  for (const auto& [service, addresses] : servers) {
    if (service == StageLink::service_full_name()) continue;
    EXPECT_TRUE(Call(addresses[0], absl::StrCat("/", service, "/Status"), bearer).ok()) << service;
  }
  // The refused calls had no effect: the job was still under way, and both
  // replicas finish it with every stage.
  absl::StatusOr<ClusterStatus> during = StatusWithToken(cluster.scheduler_address(), bearer);
  ASSERT_TRUE(during.ok()) << during.status();
  EXPECT_EQ(during->job_state(), RUNNING_JOB) << "the job ended before the calls were made";
  absl::StatusOr<int> code = cluster.WaitAll(absl::Seconds(120));
  ASSERT_TRUE(code.ok()) << code.status() << cluster.Logs();
  EXPECT_EQ(*code, 0) << cluster.Logs();
  absl::StatusOr<ClusterStatus> final_status = cluster.FinalStatus();
  ASSERT_TRUE(final_status.ok()) << final_status.status();
  EXPECT_EQ(final_status->job_state(), DONE);
  for (int w = 0; w < 4; ++w) {
    const MemberStatus m = MemberOf(*final_status, WORKER, w);
    EXPECT_EQ(m.state(), FINISHED) << "worker " << w << cluster.Logs();
    EXPECT_EQ(m.clock(), 400) << "worker " << w;
  }
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
  options.job_text = SmallJob("batch_size: 16\nclocks: 40\n");
  options.servers = 1;
  options.workers = 1;
  options.scheduler_flags = tls;
  options.server_flags = tls;
  std::vector<std::string> worker = tls;
  worker.push_back("--straggler=fixed:50");
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
