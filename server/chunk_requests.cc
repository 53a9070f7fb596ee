#include "server/chunk_requests.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/dtype.h"
#include "common/grad_codec.h"
#include "common/logging.h"
#include "common/rpc.h"
#include "common/status_macros.h"
#include "server/pull_payloads.h"
#include "server/pull_slots.h"

namespace pstrain {
namespace {

// The store's request of a decoded push header (its parts come after).
ChunkStore::PushRequest PushRequestOf(const PushHeader& h) {
  ChunkStore::PushRequest push;
  push.worker = h.worker_id;
  push.clock = h.clock;
  push.num_samples = h.num_samples;
  push.grad_norm = h.grad_norm;
  push.generation = h.generation;
  push.apply_at_once = h.apply_at_once;
  push.initial_values = h.initial_values;
  push.wire_dtype = DTypeName(h.dtype);
  return push;
}

// The push's chunks without a gradient (PushRequest.without_gradient) as
// parts after those with payloads; INVALID_ARGUMENT for initial values that
// name any, or a chunk named twice (with a payload too).
absl::Status TakeAbsent(const PushHeader& h, ChunkStore::PushRequest* push) {
  if (h.without_gradient.empty()) return absl::OkStatus();
  if (h.initial_values)
    return absl::InvalidArgumentError("push: initial values name chunks without a gradient");
  std::vector<int32_t> named = h.without_gradient;
  for (const ChunkStore::PushRequest::Part& part : push->parts) named.push_back(part.chunk);
  std::sort(named.begin(), named.end());
  if (const auto twice = std::adjacent_find(named.begin(), named.end()); twice != named.end()) {
    return absl::InvalidArgumentError(absl::StrCat("push: chunk ", *twice, " is named twice"));
  }
  for (int32_t chunk : h.without_gradient) {
    ChunkStore::PushRequest::Part part;
    part.chunk = chunk;
    part.absent = true;
    push->parts.push_back(part);
  }
  return absl::OkStatus();
}

}  // namespace

ChunkRequests::ChunkRequests(std::shared_ptr<ChunkStore> store, int64_t total_clocks,
                             ShmLayout shm_layout, ShmRegistry* shm, RequestCounters* counters,
                             std::function<void(int64_t)> on_checkpoint_asked)
    : store_(std::move(store)),
      total_clocks_(total_clocks),
      shm_(shm),
      counters_(counters),
      shm_layout_(std::move(shm_layout)),
      boot_id_(BootId()),
      on_checkpoint_asked_(std::move(on_checkpoint_asked)),
      views_(CompressesPulls(store_->job().compression())
                 ? std::make_unique<PullViews>(store_->job().compression())
                 : nullptr) {}

absl::Status ChunkRequests::Segment(uint64_t id, std::shared_ptr<ShmSegment>* segment) const {
  *segment = shm_ == nullptr ? nullptr : shm_->Find(id);
  if (*segment == nullptr) {
    return absl::NotFoundError(absl::StrCat("no shared-memory segment ", id, " here"));
  }
  return absl::OkStatus();
}

absl::Status ChunkRequests::GrantShm(const grpc::ByteBuffer& raw, grpc::ByteBuffer* resp) const {
  OpenShmRequest req;
  if (!ParseSmall(raw, &req))
    return absl::InvalidArgumentError("open_shm: the request is not an OpenShmRequest");
  if (shm_ == nullptr) {
    return absl::FailedPreconditionError("shared memory is turned off on this server (--shm=off)");
  }
  if (req.boot_id() != boot_id_) {
    return absl::FailedPreconditionError("the server runs on another host: no shared memory");
  }
  absl::StatusOr<std::string> ticket = shm_->Issue(shm_layout_.segment_bytes());
  if (!ticket.ok()) return ticket.status();
  OpenShmResponse response;
  response.set_socket_name(shm_->socket_name());
  response.set_ticket(*ticket);
  response.set_segment_bytes(shm_layout_.segment_bytes());
  *resp = SerializeSmall(response);
  return absl::OkStatus();
}

absl::Status ChunkRequests::PlaceInSlots(int width, const CompressedPush& compressed,
                                         std::vector<PayloadRef>* chunks) const {
  for (PayloadRef& c : *chunks) {
    if (c.bytes != 0 || !shm_layout_.Has(c.chunk)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "push: chunk ", c.chunk,
          c.bytes != 0 ? " has a payload in a shared-memory push" : " is not this server's"));
    }
    c.offset = static_cast<size_t>(shm_layout_.Offset(c.chunk));
    const int64_t numel = store_->ChunkNumel(c.chunk);  // its slot holds it in fp32
    c.bytes = static_cast<size_t>(compressed.Compresses(numel) ? compressed.EncodedBytes(numel)
                                                               : numel * width);
  }
  return absl::OkStatus();
}

absl::Status ChunkRequests::Push(const grpc::ByteBuffer& req, uint64_t bell_segment,
                                 PushTaken* taken, PushTaken* early) {
  if (early != nullptr) *early = PushTaken();
  SliceReader reader(req);
  PushHeader h;
  std::vector<PayloadRef> chunks;
  RETURN_IF_ERROR(DecodePush(reader, &h, &chunks));
  if (!DType_IsValid(h.dtype))
    return absl::InvalidArgumentError(absl::StrCat("push: unknown dtype ", h.dtype));
  const int width = DTypeSize(h.dtype);
  ChunkStore::PushRequest push = PushRequestOf(h);
  if (!h.hyper.empty()) {
    auto hyper = std::make_shared<OptimizerSpec>();
    if (!hyper->ParseFromString(h.hyper))
      return absl::InvalidArgumentError("push: malformed hyperparameters");
    push.hyper = std::move(hyper);
  }
  CompressedPush compressed;
  RETURN_IF_ERROR(compressed.Parse(h.compression, store_->job().compression()));
  if (compressed.active() && h.initial_values) {
    return absl::InvalidArgumentError("push: initial values go dense, not compressed");
  }
  if (h.checkpoint_clock > 0 && on_checkpoint_asked_) on_checkpoint_asked_(h.checkpoint_clock);
  std::shared_ptr<ShmSegment> segment;  // held until the push is applied
  if (bell_segment != 0 && h.shm_segment != bell_segment) {
    return absl::InvalidArgumentError("push: a frame on a segment's socket names another segment");
  }
  if (h.shm_segment != 0) {
    RETURN_IF_ERROR(Segment(h.shm_segment, &segment));
    RETURN_IF_ERROR(PlaceInSlots(width, compressed, &chunks));
  }
  const PayloadSource source{h.dtype, segment.get(), &reader};
  int64_t bytes = 0;
  RETURN_IF_ERROR(TakeParts(source, chunks, &compressed, &push, &bytes));
  RETURN_IF_ERROR(TakeAbsent(h, &push));
  // Values in the slots are read by any thread; a message's through its one reader.
  push.parts_in_parallel = segment != nullptr;
  // The store checks the whole request before it asks for any part's
  // values, so nothing more is decoded (or allocated) beyond a chunk's
  // size; the compressed parts were, once each.
  const absl::Status st = store_->Push(push, [&](size_t i) {
    if (const absl::Span<const float> decoded = compressed.Values(i); !decoded.empty()) {
      return decoded;
    }
    return source.Values(chunks[i], push.parts[i].values);
  });
  if (!st.ok()) {
    if (early != nullptr && absl::IsUnavailable(st) && !push.initial_values) {
      std::vector<int32_t> ids;
      for (const ChunkStore::PushRequest::Part& part : push.parts) ids.push_back(part.chunk);
      if (store_->PushEarly(push.worker, push.clock, push.generation, ids)) {
        *early = PushTaken{push.worker, push.clock, push.generation, std::move(ids)};
      }
    }
    return st;
  }
  if (taken != nullptr && !push.initial_values) {
    taken->worker = push.worker;
    taken->clock = push.clock;
    taken->generation = push.generation;
    for (const ChunkStore::PushRequest::Part& part : push.parts)
      taken->chunks.push_back(part.chunk);
  }
  counters_->bytes_in += bytes;
  if (segment != nullptr) counters_->shm_bytes += bytes;
  ++counters_->pushes;
  return absl::OkStatus();
}

namespace {

// Per-thread buffers, grown once to the largest chunk.
thread_local std::vector<float> grad_buffer;
thread_local std::vector<char> staging_buffer;

}  // namespace

const char* ChunkRequests::PayloadSource::Bytes(const PayloadRef& c) const {
  if (segment != nullptr) return segment->data() + c.offset;
  if (const char* whole = reader->Contiguous(c.offset, c.bytes); whole != nullptr) return whole;
  staging_buffer.resize(c.bytes);
  reader->Seek(c.offset);
  reader->Copy(c.bytes, staging_buffer.data());
  return staging_buffer.data();
}

absl::Span<const float> ChunkRequests::PayloadSource::Values(const PayloadRef& c,
                                                             int64_t numel) const {
  grad_buffer.resize(numel);
  if (segment == nullptr && dtype == FP32) {
    const char* in_place = reader->Contiguous(c.offset, c.bytes);
    if (in_place != nullptr && reinterpret_cast<uintptr_t>(in_place) % alignof(float) == 0) {
      return absl::MakeConstSpan(reinterpret_cast<const float*>(in_place), numel);
    }
    reader->Seek(c.offset);
    reader->Copy(c.bytes, reinterpret_cast<char*>(grad_buffer.data()));
    return absl::MakeConstSpan(grad_buffer.data(), numel);
  }
  const char* bytes = Bytes(c);  // the slot, or the message's bytes
  if (dtype == FP32) {
    std::memcpy(grad_buffer.data(), bytes, numel * sizeof(float));
  } else {
    DecodeFloats(dtype, bytes, numel, grad_buffer.data());
  }
  return absl::MakeConstSpan(grad_buffer.data(), numel);
}

absl::Status ChunkRequests::TakeParts(const PayloadSource& source,
                                      const std::vector<PayloadRef>& chunks,
                                      CompressedPush* compressed, ChunkStore::PushRequest* push,
                                      int64_t* bytes) const {
  const int width = DTypeSize(source.dtype);
  for (size_t i = 0; i < chunks.size(); ++i) {
    const PayloadRef& c = chunks[i];
    const int64_t numel = store_->ChunkNumel(c.chunk);
    if (compressed->Compresses(numel)) {  // decoded now: the store sees values
      RETURN_IF_ERROR(
          compressed->Decode(i, c.chunk, source.Bytes(c), static_cast<int64_t>(c.bytes), numel));
      push->parts.push_back({c.chunk, numel, static_cast<int64_t>(c.bytes)});
    } else if (c.bytes % width != 0) {
      return absl::InvalidArgumentError(absl::StrCat("push: chunk ", c.chunk, " has ", c.bytes,
                                                     " bytes, not whole ", DTypeName(source.dtype),
                                                     " values"));
    } else {
      push->parts.push_back(
          {c.chunk, static_cast<int64_t>(c.bytes / width), static_cast<int64_t>(c.bytes)});
    }
    *bytes += static_cast<int64_t>(c.bytes);
  }
  return absl::OkStatus();
}

bool ChunkRequests::Readable(const PullRequest& req) const {
  for (int32_t chunk : req.chunks()) {
    if (!store_->Readable(chunk, req.min_clock())) return false;
  }
  return true;
}

int64_t ChunkRequests::ReplyBytes(const PullRequest& req) const {
  // A shared-memory pull's payloads go into its segment, not the reply.
  if (req.shm_segment() != 0) return 0;
  int64_t bytes = 0;
  for (int32_t chunk : req.chunks()) bytes += DensePayloadBytes(*store_, chunk, req.dtype());
  return bytes;
}

absl::Status ChunkRequests::ClaimPullSlots(const PullRequest& req, ShmSegment& segment) {
  uint64_t newest = segment.newest_pull.load();
  do {
    if (req.shm_sequence() < newest) {
      return absl::AbortedError("pull: a newer pull of this worker's was answered");
    }
  } while (!segment.newest_pull.compare_exchange_weak(newest, req.shm_sequence()));
  return absl::OkStatus();
}

absl::Status ChunkRequests::FillPull(const PullRequest& req, grpc::ByteBuffer* resp) {
  std::shared_ptr<ShmSegment> segment;  // the payloads go there instead of the message
  std::optional<absl::MutexLock> writing;
  if (req.shm_segment() != 0) {
    RETURN_IF_ERROR(Segment(req.shm_segment(), &segment));
    writing.emplace(&segment->pull_mu);
    RETURN_IF_ERROR(ClaimPullSlots(req, *segment));
  }
  const std::unique_ptr<PullPayloads> payloads = PayloadsOf(req, *store_, views_.get());
  std::vector<int64_t> payload_bytes;
  PullResponse unknown;  // views the worker must offer first
  payloads->Plan(&payload_bytes, &unknown);
  if (unknown.views_unknown_size() > 0) {
    *resp = SerializeSmall(unknown);
    return absl::OkStatus();
  }
  const std::vector<int32_t> ids(req.chunks().begin(), req.chunks().end());
  PulledClocks clocks;  // of every chunk
  absl::Status read;
  // Dense payloads into a segment: written over the server's pool.
  const bool in_slots = segment != nullptr && payloads->views() == nullptr;
  if (in_slots) read = ReadIntoSlots(*store_, shm_layout_, req, ids, *segment, &clocks);
  const std::vector<int64_t> in_message =
      segment == nullptr ? payload_bytes : std::vector<int64_t>(ids.size(), 0);
  *resp = EncodePullResponse(
      ids, in_message,
      [&](size_t i, char* dst) {
        if (!read.ok() || in_slots) return;
        if (segment != nullptr) {
          dst = segment->data() + shm_layout_.region_bytes() + shm_layout_.Offset(ids[i]);
        }
        PulledClocks chunk;
        read = payloads->Write(i, dst, &chunk);
        clocks.Merge(chunk);
      },
      clocks, payloads->views());
  if (!read.ok()) {  // the chunks' memory failed: the server is failing
    resp->Clear();
    return absl::UnavailableError(absl::StrCat("pull: ", read.message()));
  }
  int64_t bytes = 0;
  for (int64_t b : payload_bytes) bytes += b;
  counters_->bytes_out += bytes;
  if (segment != nullptr) counters_->shm_bytes += bytes;
  ++counters_->pulls;
  return absl::OkStatus();
}

absl::Status ChunkRequests::CheckPull(const grpc::ByteBuffer& raw, PullRequest* req) const {
  const ChunkStore& s = *store_;
  const int64_t total_clocks = total_clocks_;
  // A pull names each of this server's chunks at most once: ~16 bytes each,
  // and a compressed pull a view of each: 10 more.
  const size_t limit = 64 + 26 * s.chunk_ids().size();
  if (raw.Length() > limit) {
    return absl::InvalidArgumentError(absl::StrCat("pull: a request of ", raw.Length(),
                                                   " bytes for a server of ", s.chunk_ids().size(),
                                                   " chunks"));
  }
  if (!ParseSmall(raw, req)) return absl::InvalidArgumentError("pull: malformed request");
  if (!DType_IsValid(req->dtype())) {
    return absl::InvalidArgumentError(absl::StrCat("pull: unknown dtype ", req->dtype()));
  }
  if (req->chunks_size() == 0) return absl::InvalidArgumentError("pull: no chunks");
  if (req->held_size() > 0 &&
      (views_ == nullptr || req->held_size() != req->chunks_size() || req->dtype() != FP32)) {
    return absl::InvalidArgumentError(views_ == nullptr
                                          ? "pull: views in a job without compressed pulls"
                                          : "pull: a view for each chunk, and fp32, or none");
  }
  if (req->worker_id() < 0 || req->worker_id() >= s.num_workers()) {
    return absl::InvalidArgumentError(absl::StrCat("pull: unknown worker ", req->worker_id()));
  }
  if (req->clock() < 0 || req->clock() > total_clocks) {
    return absl::InvalidArgumentError(
        absl::StrCat("pull: clock ", req->clock(), " outside [0, ", total_clocks, "]"));
  }
  if (req->min_clock() < 0 || req->min_clock() > total_clocks) {
    return absl::InvalidArgumentError(
        absl::StrCat("pull: min_clock ", req->min_clock(), " outside [0, ", total_clocks, "]"));
  }
  for (int32_t chunk : req->chunks()) {
    const absl::Status st = s.CheckServed(chunk);
    if (!st.ok()) return st;
  }
  // Each chunk at most once, so that the reply is never larger than the
  // server's weights.
  std::vector<int32_t> ids(req->chunks().begin(), req->chunks().end());
  std::sort(ids.begin(), ids.end());
  if (std::adjacent_find(ids.begin(), ids.end()) != ids.end()) {
    return absl::InvalidArgumentError("pull: a chunk is named twice");
  }
  return absl::OkStatus();
}

absl::Status ChunkRequests::ReadState(const grpc::ByteBuffer& raw, grpc::ByteBuffer* resp) const {
  ReadStateRequest req;
  if (!ParseSmall(raw, &req))
    return absl::InvalidArgumentError("read state: the request is not a ReadStateRequest");
  RETURN_IF_ERROR(store_->CheckGeneration(req.generation()));
  ReadStateResponse out;
  for (int32_t chunk : req.chunks()) {
    RETURN_IF_ERROR(store_->CheckServed(chunk));
    RETURN_IF_ERROR(store_->ReadState(chunk, out.add_chunks()));
  }
  *resp = SerializeSmall(out);
  return absl::OkStatus();
}

absl::Status ChunkRequests::WriteState(const grpc::ByteBuffer& raw, grpc::ByteBuffer* resp) const {
  WriteStateRequest req;
  if (!ParseSmall(raw, &req))
    return absl::InvalidArgumentError("write state: the request is not a WriteStateRequest");
  RETURN_IF_ERROR(store_->CheckGeneration(req.generation()));
  for (const ChunkState& state : req.chunks()) {
    RETURN_IF_ERROR(store_->CheckServed(state.chunk()));
  }
  for (const ChunkState& state : req.chunks()) {
    RETURN_IF_ERROR(store_->WriteState(state));
  }
  *resp = SerializeSmall(WriteStateResponse());
  return absl::OkStatus();
}

absl::Status ChunkRequests::OfferViews(const grpc::ByteBuffer& raw, grpc::ByteBuffer* resp) const {
  OfferViewsRequest req;
  if (!ParseSmall(raw, &req))
    return absl::InvalidArgumentError("offer views: the request is not an OfferViewsRequest");
  if (views_ == nullptr)
    return absl::InvalidArgumentError("offer views: this job's pulls are not compressed");
  if (req.worker_id() < 0 || req.worker_id() >= store_->num_workers()) {
    return absl::InvalidArgumentError(
        absl::StrCat("offer views: worker ", req.worker_id(), " is not of the job"));
  }
  RETURN_IF_ERROR(store_->CheckGeneration(req.generation()));
  for (const HeldView& view : req.views()) {
    RETURN_IF_ERROR(store_->CheckChunk(view.chunk()));
    RETURN_IF_ERROR(store_->CheckServed(view.chunk()));
  }
  for (const HeldView& view : req.views()) {
    const absl::Status st =
        views_->Offer(view.chunk(), req.worker_id(), view.id(),
                      std::vector<float>(view.weights().begin(), view.weights().end()),
                      store_->ChunkNumel(view.chunk()));
    if (!st.ok()) return st;
  }
  *resp = SerializeSmall(OfferViewsResponse());
  return absl::OkStatus();
}

bool ChunkRequests::PushReplicated(const PushTaken& taken) const {
  for (int32_t chunk : taken.chunks) {
    if (!store_->Replicated(chunk, taken.worker, taken.clock)) return false;
  }
  return true;
}

bool ChunkRequests::PushServed(const PushTaken& taken) const {
  for (int32_t chunk : taken.chunks) {
    if (!store_->CheckServed(chunk).ok()) return false;
  }
  return true;
}

bool ChunkRequests::PullServed(const PullRequest& req) const {
  for (int32_t chunk : req.chunks()) {
    if (!store_->CheckServed(chunk).ok()) return false;
  }
  return true;
}

}  // namespace pstrain
