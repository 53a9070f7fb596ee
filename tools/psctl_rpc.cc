#include "tools/psctl_rpc.h"

#include <cstdio>

#include "common/rpc.h"
#include "common/security.h"
#include "proto/cluster.grpc.pb.h"

namespace pstrain {

int FailCall(const std::string& address, const grpc::Status& status) {
  const char* hint = "request failed";
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    hint = TlsEnabled() ? "is the daemon running, and does it use TLS with this CA?"
                        : "is the daemon running? If it uses TLS, give --tls_ca (and "
                          "--tls_cert/--tls_key for mutual TLS)";
  } else if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
    hint = "give the daemon's token with --auth_token_file";
  }
  std::fprintf(stderr, "psctl: %s: %s (%s)\n", address.c_str(), status.error_message().c_str(),
               hint);
  return 1;
}

grpc::Status FetchStatus(const Endpoint& scheduler, ClusterStatus* status) {
  auto stub = Scheduler::NewStub(MakeChannel(scheduler.address));
  auto ctx = ContextWithTimeout(scheduler.timeout);
  return stub->Status(ctx.get(), StatusRequest(), status);
}

grpc::Status AskControl(const Endpoint& scheduler, const ControlRequest& request, int64_t* clock) {
  auto stub = Scheduler::NewStub(MakeChannel(scheduler.address));
  auto ctx = ContextWithTimeout(scheduler.timeout);
  ControlResponse resp;
  const grpc::Status rpc = stub->Control(ctx.get(), request, &resp);
  if (rpc.ok()) *clock = resp.clock();
  return rpc;
}

}  // namespace pstrain
