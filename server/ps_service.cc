#include "server/ps_service.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/process_stats.h"
#include "common/rpc.h"

namespace pstrain {
namespace {

grpc::Status Invalid(const std::string& message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
}

// The floats of a chunk's payload; copies only when the bytes are misaligned.
absl::Span<const float> AsFloats(const std::string& bytes, std::vector<float>* scratch) {
  const size_t n = bytes.size() / sizeof(float);
  if (reinterpret_cast<uintptr_t>(bytes.data()) % alignof(float) == 0) {
    return absl::Span<const float>(reinterpret_cast<const float*>(bytes.data()), n);
  }
  scratch->resize(n);
  std::memcpy(scratch->data(), bytes.data(), n * sizeof(float));
  return absl::Span<const float>(*scratch);
}

}  // namespace

void PsService::SetStore(std::shared_ptr<ShardStore> store, int64_t total_clocks) {
  absl::MutexLock lock(&mu_);
  store_ = std::move(store);
  total_clocks_ = total_clocks;
  state_ = RUNNING;
}

void PsService::SetIdentity(int id, const std::string& address) {
  absl::MutexLock lock(&mu_);
  id_ = id;
  address_ = address;
}

void PsService::SetState(MemberState state, const std::string& message) {
  absl::MutexLock lock(&mu_);
  state_ = state;
  message_ = message;
}

std::shared_ptr<ShardStore> PsService::store() const {
  absl::MutexLock lock(&mu_);
  return store_;
}

grpc::ServerUnaryReactor* PsService::Push(grpc::CallbackServerContext* ctx,
                                          const PushRequest* req, PushResponse* resp) {
  std::shared_ptr<ShardStore> s = store();
  if (s == nullptr) {
    return FinishNow(ctx, grpc::Status(grpc::StatusCode::UNAVAILABLE, "server not ready"));
  }
  if (req->dtype() != FP32) return FinishNow(ctx, Invalid("push: only fp32 on the wire"));
  // Validate the whole request first: it is applied whole or not at all.
  for (const ChunkData& c : req->chunks()) {
    if (c.data().size() % sizeof(float) != 0) {
      return FinishNow(ctx, Invalid(absl::StrCat("push: chunk ", c.chunk(), " has ",
                                                 c.data().size(), " bytes, not whole fp32s")));
    }
    const absl::Status st = s->CheckPush(req->worker_id(), req->clock(), req->num_samples(),
                                         c.chunk(), c.data().size() / sizeof(float));
    if (!st.ok()) return FinishNow(ctx, ToGrpc(st));
  }
  std::vector<float> scratch;
  int64_t bytes = 0;
  for (const ChunkData& c : req->chunks()) {
    const absl::Status st = s->Push(req->worker_id(), req->clock(), req->num_samples(),
                                    c.chunk(), AsFloats(c.data(), &scratch));
    if (!st.ok()) return FinishNow(ctx, ToGrpc(st));
    bytes += static_cast<int64_t>(c.data().size());
  }
  bytes_in_ += bytes;
  ++pushes_;
  WakePulls();
  return FinishNow(ctx, grpc::Status::OK);
}

bool PsService::Readable(const ShardStore& store, const PullRequest& req) const {
  for (int32_t chunk : req.chunks()) {
    if (!store.Readable(chunk, req.min_clock())) return false;
  }
  return true;
}

void PsService::FillPull(const ShardStore& store, const PullRequest& req, PullResponse* resp) {
  std::vector<int64_t> applied, min_applied;
  int64_t bytes = 0;
  for (int32_t chunk : req.chunks()) {
    ChunkData* out = resp->add_chunks();
    out->set_chunk(chunk);
    store.Read(req.worker_id(), req.clock(), req.min_clock(), chunk, out->mutable_data(),
               &applied);
    if (min_applied.empty()) {
      min_applied = applied;
    } else {
      for (size_t w = 0; w < applied.size(); ++w) {
        min_applied[w] = std::min(min_applied[w], applied[w]);
      }
    }
    bytes += static_cast<int64_t>(out->data().size());
  }
  for (int64_t a : min_applied) resp->add_applied_clock(a);
  bytes_out_ += bytes;
  ++pulls_;
}

grpc::ServerUnaryReactor* PsService::Pull(grpc::CallbackServerContext* ctx,
                                          const PullRequest* req, PullResponse* resp) {
  std::shared_ptr<ShardStore> s = store();
  if (s == nullptr) {
    return FinishNow(ctx, grpc::Status(grpc::StatusCode::UNAVAILABLE, "server not ready"));
  }
  int64_t total_clocks;
  {
    absl::MutexLock lock(&mu_);
    total_clocks = total_clocks_;
  }
  if (req->dtype() != FP32) return FinishNow(ctx, Invalid("pull: only fp32 on the wire"));
  if (req->chunks_size() == 0) return FinishNow(ctx, Invalid("pull: no chunks"));
  if (req->min_clock() < 0 || req->min_clock() > total_clocks) {
    return FinishNow(ctx, Invalid(absl::StrCat("pull: min_clock ", req->min_clock(),
                                               " outside [0, ", total_clocks, "]")));
  }
  for (int32_t chunk : req->chunks()) {
    const absl::Status st = s->CheckChunk(chunk);
    if (!st.ok()) return FinishNow(ctx, ToGrpc(st));
  }
  absl::MutexLock lock(&parked_mu_);
  if (Readable(*s, *req)) {
    FillPull(*s, *req, resp);
    return FinishNow(ctx, grpc::Status::OK);
  }
  auto* reactor = new ParkedReactor();
  parked_.emplace_back(reactor, PendingPull{req, resp});
  return reactor;
}

void PsService::WakePulls() {
  std::shared_ptr<ShardStore> s = store();
  absl::MutexLock lock(&parked_mu_);
  for (auto it = parked_.begin(); it != parked_.end();) {
    if (it->Gone()) {
      it = parked_.erase(it);
    } else if (Readable(*s, *it->what.request) && it->Claim()) {
      FillPull(*s, *it->what.request, it->what.response);
      it->reactor->Finish(grpc::Status::OK);
      it = parked_.erase(it);
    } else {
      ++it;
    }
  }
}

void PsService::CancelParked(const grpc::Status& status) {
  absl::MutexLock lock(&parked_mu_);
  for (auto& p : parked_) {
    if (p.Claim()) p.reactor->Finish(status);
  }
  parked_.clear();
}

NodeStatus PsService::GetStatus() const {
  NodeStatus st;
  std::shared_ptr<ShardStore> s;
  {
    absl::MutexLock lock(&mu_);
    st.set_id(id_);
    st.set_address(address_);
    st.set_state(state_);
    st.set_message(message_);
    s = store_;
  }
  st.set_role(SERVER);
  st.set_uptime_s(absl::ToDoubleSeconds(absl::Now() - start_));
  st.set_clock(s == nullptr ? 0 : s->MinAppliedClock());
  st.set_bytes_in(bytes_in_);
  st.set_bytes_out(bytes_out_);
  st.set_pushes(pushes_);
  st.set_pulls(pulls_);
  st.set_rss_bytes(ResidentBytes());
  st.set_test_accuracy(-1);
  return st;
}

grpc::ServerUnaryReactor* PsService::Status(grpc::CallbackServerContext* ctx,
                                            const StatusRequest* /*req*/, NodeStatus* resp) {
  *resp = GetStatus();
  return FinishNow(ctx, grpc::Status::OK);
}

}  // namespace pstrain
