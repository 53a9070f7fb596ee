#include "common/rpc.h"

#include <cstdlib>
#include <map>
#include <random>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/port_owner.h"
#include "common/security.h"

namespace pstrain {

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  // Reconnect quickly after a peer restarts.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, ChannelCredentials(),
                                                                 args, TokenInterceptors());
}

namespace {

// Transport settings for bulk tensor traffic, on both ends of a connection.
// (PSTRAIN_GRPC_TUNE=name=value,... overrides them for experiments.)
template <typename Args>
void SetBulkArgs(Args* args) {
  std::map<std::string, int> settings = {
      {GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 8 << 20},
      {GRPC_ARG_HTTP2_MAX_FRAME_SIZE, 1 << 20},
      {GRPC_ARG_TCP_READ_CHUNK_SIZE, 1 << 20},
      {GRPC_ARG_TCP_MIN_READ_CHUNK_SIZE, 256 << 10},
      {GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE, 4 << 20},
  };
  if (const char* tune = std::getenv("PSTRAIN_GRPC_TUNE")) {
    for (absl::string_view kv : absl::StrSplit(tune, ',', absl::SkipEmpty())) {
      std::pair<std::string, std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
      int v = 0;
      if (absl::SimpleAtoi(p.second, &v)) settings[p.first] = v;  // -1: gRPC's default
    }
  }
  for (const auto& [name, value] : settings) {
    if (value >= 0) args->SetInt(name, value);
  }
}

struct BuilderArgs {
  grpc::ServerBuilder* builder;
  void SetInt(const std::string& name, int value) { builder->AddChannelArgument(name, value); }
};

}  // namespace

std::shared_ptr<grpc::Channel> MakeBulkChannel(const std::string& address) {
  grpc::ChannelArguments args;
  SetBulkArgs(&args);
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, ChannelCredentials(),
                                                                 args, TokenInterceptors());
}

absl::StatusOr<std::unique_ptr<grpc::Server>> StartServer(
    const std::string& listen, const std::vector<grpc::Service*>& services, std::string* bound,
    const ServerOptions& options) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("--listen=", listen, ": expected HOST:PORT"));
  }
  int requested_port = 0;
  if (!absl::SimpleAtoi(listen.substr(colon + 1), &requested_port) || requested_port < 0 ||
      requested_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--listen=", listen, ": bad port"));
  }
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, ServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(options.max_receive_bytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  BuilderArgs bulk{&builder};
  SetBulkArgs(&bulk);
  bulk.SetInt(GRPC_ARG_MAX_CONCURRENT_STREAMS, options.max_streams_per_client);
  // One process a port: with SO_REUSEPORT (gRPC's default) a second daemon
  // started on a port in use would bind it too and take half the calls.
  bulk.SetInt(GRPC_ARG_ALLOW_REUSEPORT, 0);
  if (options.quota != nullptr) builder.SetResourceQuota(*options.quota);
  for (grpc::Service* s : services) builder.RegisterService(s);
  if (options.queues != nullptr) {
    for (int i = 0; i < options.num_queues; ++i) {
      options.queues->push_back(builder.AddCompletionQueue());
    }
  }
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    const std::string owner =
        requested_port == 0 ? "" : PortOwner(listen.substr(0, colon), requested_port);
    if (!owner.empty()) {
      return absl::UnavailableError(absl::StrCat("cannot listen on ", listen, ": port ",
                                                 requested_port, " is held by ", owner));
    }
    return absl::UnavailableError(absl::StrCat("cannot listen on ", listen));
  }
  WarnIfOpenWithoutToken(listen);
  *bound = absl::StrCat(listen.substr(0, colon), ":", port);
  return server;
}

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

grpc::Status InvalidArgument(const std::string& message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
}

std::unique_ptr<grpc::ClientContext> ContextWithTimeout(absl::Duration timeout) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
  return ctx;
}

Backoff::Backoff(absl::Duration initial, absl::Duration max) : next_(initial), max_(max) {}

absl::Duration Backoff::Next() {
  thread_local std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<double> jitter(0.8, 1.2);
  const absl::Duration d = next_ * jitter(rng);
  next_ = std::min(next_ * 2, max_);
  return d;
}

bool IsTransient(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsCancelled(status);
}

bool IsRetryable(const absl::Status& status) {
  return IsTransient(status) || absl::IsDeadlineExceeded(status) ||
         absl::IsResourceExhausted(status) || absl::IsAborted(status);
}

}  // namespace pstrain
