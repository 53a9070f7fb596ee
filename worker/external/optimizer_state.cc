#include "worker/external/optimizer_state.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>

#include "absl/strings/str_cat.h"
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
    if (cs.slots() < 0 || cs.state_size() != cs.slots() * info.numel) {
      return absl::InternalError(absl::StrCat("read state: chunk ", cs.chunk(), " has ",
                                              cs.state_size(), " values for ", cs.slots(),
                                              " slots of ", info.numel));
    }
    ParamState& p = (*out)[info.param];
    p.slots.resize(cs.slots(), std::vector<float>(params[info.param].numel));
    p.steps = std::min(p.steps, cs.steps());
    for (int k = 0; k < cs.slots(); ++k) {
      std::copy_n(cs.state().data() + k * info.numel, info.numel, p.slots[k].begin() + info.offset);
    }
  }
  return absl::OkStatus();
}

// A server's refusal as a status naming it.
absl::Status Refused(int server, const std::string& address, const char* what,
                     const grpc::Status& st) {
  return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                      absl::StrCat("server ", server, " at ", address, " refused to ", what, ": ",
                                   st.error_message()));
}

// Calls `call` (with a fresh context of a 60 s deadline) until it
// succeeds or fails for good: a server that is not ready yet (it has not
// received the job's partition, or not restored the generation) or not
// reachable is tried again with backoff for RetryPolicy's window.
absl::Status Call(const std::function<grpc::Status(grpc::ClientContext*)>& call, int server,
                  const std::string& address, const char* what) {
  return Retry(RetryPolicy(), [&]() -> absl::Status {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    const grpc::Status st = call(&ctx);
    return st.ok() ? absl::OkStatus() : Refused(server, address, what, st);
  });
}

}  // namespace

absl::Status WriteOptimizerState(const Partition& partition,
                                 const std::vector<std::string>& servers, int64_t generation,
                                 const std::vector<ParamState>& state) {
  for (int s = 0; s < partition.num_servers(); ++s) {
    if (s >= static_cast<int>(servers.size()) || servers[s].empty()) {
      return absl::UnavailableError(absl::StrCat("server ", s, "'s address is not known"));
    }
    std::unique_ptr<ParameterServer::Stub> stub = ParameterServer::NewStub(MakeChannel(servers[s]));
    WriteStateRequest req;
    int64_t elements = 0;
    auto send = [&]() -> absl::Status {
      if (req.chunks().empty()) return absl::OkStatus();
      req.set_generation(generation);
      WriteStateResponse resp;
      RETURN_IF_ERROR(
          Call([&](grpc::ClientContext* ctx) { return stub->WriteState(ctx, req, &resp); }, s,
               servers[s], "take the optimizer's state"));
      req.Clear();
      elements = 0;
      return absl::OkStatus();
    };
    for (int32_t chunk : partition.ServerChunks(s)) {
      const ChunkInfo& info = partition.chunks()[chunk];
      const ParamState& p = state[info.param];
      if (p.slots.empty()) continue;
      if (elements + info.numel * static_cast<int64_t>(p.slots.size()) > kElementsPerCall) {
        RETURN_IF_ERROR(send());
      }
      ChunkState* cs = req.add_chunks();
      cs->set_chunk(chunk);
      cs->set_steps(p.steps);
      cs->set_slots(static_cast<int>(p.slots.size()));
      for (const std::vector<float>& slot : p.slots) {
        cs->mutable_state()->Add(slot.begin() + info.offset,
                                 slot.begin() + info.offset + info.numel);
      }
      elements += info.numel * static_cast<int64_t>(p.slots.size());
    }
    RETURN_IF_ERROR(send());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ParamState>> ReadOptimizerState(const Partition& partition,
                                                           const std::vector<ParamInfo>& params,
                                                           const std::vector<std::string>& servers,
                                                           int64_t generation) {
  std::vector<ParamState> out(params.size());
  for (ParamState& p : out) p.steps = std::numeric_limits<int64_t>::max();
  for (int s = 0; s < partition.num_servers(); ++s) {
    if (s >= static_cast<int>(servers.size()) || servers[s].empty()) {
      return absl::UnavailableError(absl::StrCat("server ", s, "'s address is not known"));
    }
    std::unique_ptr<ParameterServer::Stub> stub = ParameterServer::NewStub(MakeChannel(servers[s]));
    const std::vector<int32_t>& chunks = partition.ServerChunks(s);
    for (size_t i = 0; i < chunks.size();) {
      ReadStateRequest req;
      req.set_generation(generation);
      for (int64_t elements = 0;
           i < chunks.size() &&
           (elements == 0 || elements + partition.chunks()[chunks[i]].numel <= kElementsPerCall);
           ++i) {
        elements += partition.chunks()[chunks[i]].numel;
        req.add_chunks(chunks[i]);
      }
      ReadStateResponse resp;
      RETURN_IF_ERROR(
          Call([&](grpc::ClientContext* ctx) { return stub->ReadState(ctx, req, &resp); }, s,
               servers[s], "read its state"));
      RETURN_IF_ERROR(Take(partition, params, resp, &out));
    }
  }
  for (ParamState& p : out) {
    if (p.steps == std::numeric_limits<int64_t>::max()) p.steps = 0;
  }
  return out;
}

}  // namespace pstrain
