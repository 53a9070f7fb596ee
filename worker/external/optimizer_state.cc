#include "worker/external/optimizer_state.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/daemon_status.h"
#include "common/retry.h"
#include "common/rpc.h"
#include "common/status_macros.h"
#include "proto/ps.grpc.pb.h"

namespace pstrain {
namespace {

// Elements of chunks asked for in one call (Adam's state: 32 MiB).
constexpr int64_t kElementsPerCall = 4 << 20;

// Copies a server's answer into `out`.
absl::Status Take(const Partition& partition, const std::vector<ParamInfo>& params,
                  const ReadStateResponse& resp, std::vector<ParamState>* out) {
  for (const ChunkState& cs : resp.chunks()) {
    if (cs.chunk() < 0 || cs.chunk() >= static_cast<int>(partition.chunks().size())) {
      return absl::InternalError(absl::StrCat("read state: unknown chunk ", cs.chunk()));
    }
    const ChunkInfo& info = partition.chunks()[cs.chunk()];
    if (cs.arrays() < 0 || cs.state_size() != cs.arrays() * info.numel) {
      return absl::InternalError(absl::StrCat("read state: chunk ", cs.chunk(), " has ",
                                              cs.state_size(), " values for ", cs.arrays(),
                                              " arrays of ", info.numel));
    }
    ParamState& p = (*out)[info.param];
    p.arrays.resize(cs.arrays(), std::vector<float>(params[info.param].numel));
    p.steps = std::min(p.steps, cs.steps());
    for (int k = 0; k < cs.arrays(); ++k) {
      std::copy_n(cs.state().data() + k * info.numel, info.numel,
                  p.arrays[k].begin() + info.offset);
    }
  }
  return absl::OkStatus();
}

// One home server's state calls: each attempt goes where its chunks are
// served then (StateCalls::home_addresses), on a new channel when that
// moved, with common/retry.h's backoff.
class HomeCalls {
 public:
  HomeCalls(const StateCalls& calls, int home) : calls_(calls), home_(home) {}

  // Runs `call` (with a fresh context of a 60 s deadline) until it
  // succeeds or fails for good; its failure names the home server's
  // chunks, the address tried and `what` was being done.
  absl::Status Run(const char* what,
                   const std::function<grpc::Status(ParameterServer::Stub*, grpc::ClientContext*)>&
                       call) {
    RetryPolicy policy;
    policy.window = calls_.retry_window;
    policy.abandon = calls_.abandon;
    return FromDaemon(
        SERVER, Retry(policy, [&]() -> absl::Status {
          RETURN_IF_ERROR(Connect());
          grpc::ClientContext ctx;
          ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
          const grpc::Status st = call(stub_.get(), &ctx);
          if (st.ok()) return absl::OkStatus();
          return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                              absl::StrCat(what, " server ", home_, "'s chunks at ", address_, ": ",
                                           st.error_message()));
        }));
  }

 private:
  // A stub for the address that serves the home's chunks now.
  absl::Status Connect() {
    const std::vector<std::string> addresses = calls_.home_addresses();
    if (home_ >= static_cast<int>(addresses.size()) || addresses[home_].empty()) {
      return absl::UnavailableError(
          absl::StrCat("the address serving server ", home_, "'s chunks is not known yet"));
    }
    if (stub_ == nullptr || addresses[home_] != address_) {
      address_ = addresses[home_];
      stub_ = ParameterServer::NewStub(MakeChannel(address_));
    }
    return absl::OkStatus();
  }

  const StateCalls& calls_;
  const int home_;
  std::string address_;
  std::unique_ptr<ParameterServer::Stub> stub_;
};

}  // namespace

absl::Status WriteOptimizerState(const Partition& partition, const StateCalls& calls,
                                 const std::vector<ParamState>& state) {
  for (int s = 0; s < partition.num_servers(); ++s) {
    HomeCalls home(calls, s);
    WriteStateRequest req;
    int64_t elements = 0;
    auto send = [&]() -> absl::Status {
      if (req.chunks().empty()) return absl::OkStatus();
      req.set_generation(calls.generation);
      WriteStateResponse resp;
      RETURN_IF_ERROR(home.Run("giving the optimizer's state to",
                               [&](ParameterServer::Stub* stub, grpc::ClientContext* ctx) {
                                 return stub->WriteState(ctx, req, &resp);
                               }));
      req.Clear();
      elements = 0;
      return absl::OkStatus();
    };
    for (int32_t chunk : partition.ServerChunks(s)) {
      const ChunkInfo& info = partition.chunks()[chunk];
      const ParamState& p = state[info.param];
      if (p.arrays.empty()) continue;
      if (elements + info.numel * static_cast<int64_t>(p.arrays.size()) > kElementsPerCall) {
        RETURN_IF_ERROR(send());
      }
      ChunkState* cs = req.add_chunks();
      cs->set_chunk(chunk);
      cs->set_steps(p.steps);
      cs->set_arrays(static_cast<int>(p.arrays.size()));
      for (const std::vector<float>& array : p.arrays) {
        cs->mutable_state()->Add(array.begin() + info.offset,
                                 array.begin() + info.offset + info.numel);
      }
      elements += info.numel * static_cast<int64_t>(p.arrays.size());
    }
    RETURN_IF_ERROR(send());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ParamState>> ReadOptimizerState(const Partition& partition,
                                                           const std::vector<ParamInfo>& params,
                                                           const StateCalls& calls) {
  std::vector<ParamState> out(params.size());
  for (ParamState& p : out) p.steps = std::numeric_limits<int64_t>::max();
  for (int s = 0; s < partition.num_servers(); ++s) {
    HomeCalls home(calls, s);
    const std::vector<int32_t>& chunks = partition.ServerChunks(s);
    for (size_t i = 0; i < chunks.size();) {
      ReadStateRequest req;
      req.set_generation(calls.generation);
      for (int64_t elements = 0;
           i < chunks.size() &&
           (elements == 0 || elements + partition.chunks()[chunks[i]].numel <= kElementsPerCall);
           ++i) {
        elements += partition.chunks()[chunks[i]].numel;
        req.add_chunks(chunks[i]);
      }
      ReadStateResponse resp;
      RETURN_IF_ERROR(home.Run("reading the optimizer state of",
                               [&](ParameterServer::Stub* stub, grpc::ClientContext* ctx) {
                                 return stub->ReadState(ctx, req, &resp);
                               }));
      RETURN_IF_ERROR(Take(partition, params, resp, &out));
    }
  }
  for (ParamState& p : out) {
    if (p.steps == std::numeric_limits<int64_t>::max()) p.steps = 0;
  }
  return out;
}

}  // namespace pstrain
