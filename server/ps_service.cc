#include "server/ps_service.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/process_stats.h"
#include "common/rpc.h"
#include "common/tensor_wire.h"

namespace pstrain {
namespace {

grpc::Status Invalid(const std::string& message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
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

grpc::Status PsService::DoPush(ShardStore& store, const grpc::ByteBuffer& req) {
  SliceReader reader(req);
  PushHeader h;
  std::vector<PayloadRef> chunks;
  if (const absl::Status st = DecodePush(reader, &h, &chunks); !st.ok()) return ToGrpc(st);
  if (!DType_IsValid(h.dtype)) return Invalid(absl::StrCat("push: unknown dtype ", h.dtype));
  if (!(h.grad_norm >= 0) || std::isinf(h.grad_norm)) {
    return Invalid(absl::StrCat("push: grad_norm ", h.grad_norm, " is not a finite norm"));
  }
  const int width = DTypeSize(h.dtype);
  // Validate the whole request first (each payload's size against its
  // chunk's declared size): it is applied whole or not at all, and nothing
  // is allocated for a chunk beyond its declared size.
  for (const PayloadRef& c : chunks) {
    const int64_t numel = store.ChunkNumel(c.chunk);
    if (numel == 0)
      return Invalid(absl::StrCat("push: unknown chunk ", c.chunk, " for this server"));
    if (c.bytes != static_cast<size_t>(numel) * width) {
      return Invalid(absl::StrCat("push: chunk ", c.chunk, " has ", numel, " values; the push has ",
                                  c.bytes, " bytes of ", DTypeName(h.dtype)));
    }
    const absl::Status st = store.CheckPush(h.worker_id, h.clock, h.num_samples, c.chunk, numel);
    if (!st.ok()) return ToGrpc(st);
  }
  // Per-thread buffers, grown once to the largest chunk.
  thread_local std::vector<float> grad;
  thread_local std::vector<char> staging;
  int64_t bytes = 0;
  for (const PayloadRef& c : chunks) {
    const int64_t numel = store.ChunkNumel(c.chunk);
    // fp32 lying whole and aligned in one received slice is used in place.
    const char* in_place = h.dtype == FP32 ? reader.Contiguous(c.offset, c.bytes) : nullptr;
    const float* values = reinterpret_cast<const float*>(in_place);
    if (in_place == nullptr || reinterpret_cast<uintptr_t>(in_place) % alignof(float) != 0) {
      grad.resize(numel);
      reader.Seek(c.offset);
      if (h.dtype == FP32) {
        reader.Copy(c.bytes, reinterpret_cast<char*>(grad.data()));
      } else {
        staging.resize(c.bytes);
        reader.Copy(c.bytes, staging.data());
        DecodeFloats(h.dtype, staging.data(), numel, grad.data());
      }
      values = grad.data();
    }
    const absl::Status st = store.Push(h.worker_id, h.clock, h.num_samples, c.chunk,
                                       absl::MakeConstSpan(values, numel), h.grad_norm);
    if (!st.ok()) return ToGrpc(st);
    bytes += static_cast<int64_t>(c.bytes);
  }
  bytes_in_ += bytes;
  ++pushes_;
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* PsService::Push(grpc::CallbackServerContext* ctx,
                                          const grpc::ByteBuffer* req, grpc::ByteBuffer* resp) {
  std::shared_ptr<ShardStore> s = store();
  if (s == nullptr) {
    return FinishNow(ctx, grpc::Status(grpc::StatusCode::UNAVAILABLE, "server not ready"));
  }
  const grpc::Status st = DoPush(*s, *req);
  if (st.ok()) WakePulls();
  *resp = SerializeSmall(PushResponse());  // empty, but a message
  return FinishNow(ctx, st);
}

bool PsService::Readable(const ShardStore& store, const PullRequest& req) const {
  for (int32_t chunk : req.chunks()) {
    if (!store.Readable(chunk, req.min_clock())) return false;
  }
  return true;
}

void PsService::FillPull(const ShardStore& store, const PullRequest& req, grpc::ByteBuffer* resp) {
  const std::vector<int32_t> ids(req.chunks().begin(), req.chunks().end());
  std::vector<int64_t> payload_bytes(ids.size());
  int64_t bytes = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    payload_bytes[i] = store.ChunkNumel(ids[i]) * DTypeSize(req.dtype());
    bytes += payload_bytes[i];
  }
  std::vector<int64_t> applied, min_applied;
  *resp = EncodePullResponse(
      ids, payload_bytes,
      [&](size_t i, char* dst) {
        store.Read(req.worker_id(), req.clock(), req.min_clock(), ids[i], req.dtype(), dst,
                   &applied);
        if (min_applied.empty()) {
          min_applied = applied;
        } else {
          for (size_t w = 0; w < applied.size(); ++w) {
            min_applied[w] = std::min(min_applied[w], applied[w]);
          }
        }
      },
      min_applied);
  bytes_out_ += bytes;
  ++pulls_;
}

grpc::ServerUnaryReactor* PsService::Pull(grpc::CallbackServerContext* ctx,
                                          const grpc::ByteBuffer* raw, grpc::ByteBuffer* resp) {
  std::shared_ptr<ShardStore> s = store();
  if (s == nullptr) {
    return FinishNow(ctx, grpc::Status(grpc::StatusCode::UNAVAILABLE, "server not ready"));
  }
  int64_t total_clocks;
  {
    absl::MutexLock lock(&mu_);
    total_clocks = total_clocks_;
  }
  auto req = std::make_unique<PullRequest>();
  // A pull names each of this server's chunks at most once: ~16 bytes each.
  const size_t limit = 64 + 16 * s->chunk_ids().size();
  if (raw->Length() > limit) {
    return FinishNow(ctx, Invalid(absl::StrCat("pull: a request of ", raw->Length(),
                                               " bytes for a server of ",
                                               s->chunk_ids().size(), " chunks")));
  }
  if (!ParseSmall(*raw, req.get())) return FinishNow(ctx, Invalid("pull: malformed request"));
  if (!DType_IsValid(req->dtype())) {
    return FinishNow(ctx, Invalid(absl::StrCat("pull: unknown dtype ", req->dtype())));
  }
  if (req->chunks_size() == 0) return FinishNow(ctx, Invalid("pull: no chunks"));
  if (req->min_clock() < 0 || req->min_clock() > total_clocks) {
    return FinishNow(ctx, Invalid(absl::StrCat("pull: min_clock ", req->min_clock(),
                                               " outside [0, ", total_clocks, "]")));
  }
  for (int32_t chunk : req->chunks()) {
    const absl::Status st = s->CheckChunk(chunk);
    if (!st.ok()) return FinishNow(ctx, ToGrpc(st));
  }
  // Each chunk at most once, so that the reply is never larger than the
  // server's weights.
  std::vector<int32_t> ids(req->chunks().begin(), req->chunks().end());
  std::sort(ids.begin(), ids.end());
  if (std::adjacent_find(ids.begin(), ids.end()) != ids.end()) {
    return FinishNow(ctx, Invalid("pull: a chunk is named twice"));
  }
  absl::MutexLock lock(&parked_mu_);
  if (Readable(*s, *req)) {
    FillPull(*s, *req, resp);
    return FinishNow(ctx, grpc::Status::OK);
  }
  auto* reactor = new ParkedReactor();
  parked_.emplace_back(reactor, PendingPull{std::move(req), resp});
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
  if (s != nullptr && s->NumParams() > 0) {
    st.set_params(s->NumParams());
    st.set_bytes_per_param(static_cast<double>(s->BytesHeld()) / s->NumParams());
    st.set_nonfinite_skipped(s->NonfiniteSkipped());
  }
  st.set_test_accuracy(-1);
  return st;
}

grpc::ServerUnaryReactor* PsService::Status(grpc::CallbackServerContext* ctx,
                                            const StatusRequest* /*req*/, NodeStatus* resp) {
  *resp = GetStatus();
  return FinishNow(ctx, grpc::Status::OK);
}

}  // namespace pstrain
