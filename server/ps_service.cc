#include "server/ps_service.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/dtype.h"
#include "common/metrics.h"
#include "common/process_stats.h"
#include "common/rpc.h"
#include "common/row_wire.h"
#include "common/shm.h"
#include "common/tensor_wire.h"

namespace pstrain {
namespace {

grpc::Status Invalid(const std::string& message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
}

}  // namespace

void PsService::SetStore(std::shared_ptr<ChunkStore> store, int64_t total_clocks) {
  std::vector<std::pair<int32_t, int64_t>> chunks;
  for (int32_t id : store->chunk_ids()) chunks.push_back({id, store->ChunkNumel(id)});
  absl::MutexLock lock(&mu_);
  // Read only by callers that got store_ from store() (under mu_), after this.
  shm_layout_ = ShmLayout::Make(std::move(chunks));
  store_ = std::move(store);
  total_clocks_ = total_clocks;
  state_ = RUNNING;
}

void PsService::SetTables(std::shared_ptr<SparseTables> tables) {
  absl::MutexLock lock(&mu_);
  tables_ = std::move(tables);
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

PsService::~PsService() { shm_.reset(); }

void PsService::SetShm(std::unique_ptr<ShmRegistry> shm) {
  shm_ = std::move(shm);
  boot_id_ = BootId();
  shm_->SetHandler([this](std::shared_ptr<ShmBell> bell, ShmFrame frame) {
    Ring(std::move(bell), std::move(frame));
  });
}

grpc::Status PsService::Segment(uint64_t id, std::shared_ptr<ShmSegment>* segment) const {
  *segment = shm_ == nullptr ? nullptr : shm_->Find(id);
  if (*segment == nullptr) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("no shared-memory segment ", id, " here"));
  }
  return grpc::Status::OK;
}

grpc::Status PsService::GrantShm(const grpc::ByteBuffer& raw, grpc::ByteBuffer* resp) {
  OpenShmRequest req;
  if (!ParseSmall(raw, &req)) return Invalid("open_shm: the request is not an OpenShmRequest");
  if (shm_ == nullptr) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "shared memory is turned off on this server (--shm=off)");
  }
  if (req.boot_id() != boot_id_) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "the server runs on another host: no shared memory");
  }
  if (store() == nullptr) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "server not ready");
  }
  absl::StatusOr<std::string> ticket = shm_->Issue(shm_layout_.segment_bytes());
  if (!ticket.ok()) return ToGrpc(ticket.status());
  OpenShmResponse response;
  response.set_socket_name(shm_->socket_name());
  response.set_ticket(*ticket);
  response.set_segment_bytes(shm_layout_.segment_bytes());
  *resp = SerializeSmall(response);
  return grpc::Status::OK;
}

std::shared_ptr<ChunkStore> PsService::store() const {
  absl::MutexLock lock(&mu_);
  return store_;
}

std::shared_ptr<SparseTables> PsService::tables() const {
  absl::MutexLock lock(&mu_);
  return tables_;
}

grpc::Status PsService::PlaceInSlots(int width, std::vector<PayloadRef>* chunks) const {
  for (PayloadRef& c : *chunks) {
    if (c.bytes != 0 || !shm_layout_.Has(c.chunk)) {
      return Invalid(absl::StrCat("push: chunk ", c.chunk,
                                  c.bytes != 0 ? " has a payload in a shared-memory push"
                                               : " is not this server's"));
    }
    c.offset = static_cast<size_t>(shm_layout_.Offset(c.chunk));
    c.bytes = static_cast<size_t>(shm_layout_.SlotBytes(c.chunk) / 4 * width);
  }
  return grpc::Status::OK;
}

namespace {

// The store's request of a decoded push header (its parts come after).
ChunkStore::PushRequest PushRequestOf(const PushHeader& h) {
  ChunkStore::PushRequest push;
  push.worker = h.worker_id;
  push.clock = h.clock;
  push.num_samples = h.num_samples;
  push.grad_norm = h.grad_norm;
  push.generation = h.generation;
  push.checkpoint_clock = h.checkpoint_clock;
  push.apply_at_once = h.apply_at_once;
  push.seed = h.seed;
  push.wire_dtype = DTypeName(h.dtype);
  return push;
}

}  // namespace

grpc::Status PsService::DoPush(ChunkStore& store, const grpc::ByteBuffer& req,
                               uint64_t bell_segment) {
  SliceReader reader(req);
  PushHeader h;
  std::vector<PayloadRef> chunks;
  if (const absl::Status st = DecodePush(reader, &h, &chunks); !st.ok()) return ToGrpc(st);
  if (!DType_IsValid(h.dtype)) return Invalid(absl::StrCat("push: unknown dtype ", h.dtype));
  const int width = DTypeSize(h.dtype);
  ChunkStore::PushRequest push = PushRequestOf(h);
  if (h.checkpoint_clock > 0) {  // the tables' checkpoints follow the chunks' asked clock
    if (const std::shared_ptr<SparseTables> t = tables(); t != nullptr) {
      t->AskCheckpoint(h.checkpoint_clock);
    }
  }
  std::shared_ptr<ShmSegment> segment;  // held until the push is applied
  if (bell_segment != 0 && h.shm_segment != bell_segment) {
    return Invalid("push: a frame on a segment's socket names another segment");
  }
  if (h.shm_segment != 0) {
    if (const grpc::Status st = Segment(h.shm_segment, &segment); !st.ok()) return st;
    if (const grpc::Status st = PlaceInSlots(width, &chunks); !st.ok()) return st;
  }
  int64_t bytes = 0;
  for (const PayloadRef& c : chunks) {
    if (c.bytes % width != 0) {
      return Invalid(absl::StrCat("push: chunk ", c.chunk, " has ", c.bytes, " bytes, not whole ",
                                  DTypeName(h.dtype), " values"));
    }
    push.parts.push_back(
        {c.chunk, static_cast<int64_t>(c.bytes / width), static_cast<int64_t>(c.bytes)});
    bytes += static_cast<int64_t>(c.bytes);
  }
  // Per-thread buffers, grown once to the largest chunk.
  thread_local std::vector<float> grad;
  thread_local std::vector<char> staging;
  // The store checks the whole request before it asks for any part's
  // values, so nothing is decoded (or allocated) beyond a chunk's size.
  const absl::Status st = store.Push(push, [&](size_t i) {
    const PayloadRef& c = chunks[i];
    const int64_t numel = push.parts[i].values;
    if (segment != nullptr) {
      // Copied once out of the slot: the worker can write it at any time,
      // and the store reads a part more than once (the finiteness check,
      // then the update).
      const char* slot = segment->data() + c.offset;
      grad.resize(numel);
      if (h.dtype == FP32) {
        std::memcpy(grad.data(), slot, numel * sizeof(float));
      } else {
        DecodeFloats(h.dtype, slot, numel, grad.data());
      }
      return absl::MakeConstSpan(grad.data(), numel);
    }
    // fp32 lying whole and aligned in one received slice is used in place.
    const char* in_place = h.dtype == FP32 ? reader.Contiguous(c.offset, c.bytes) : nullptr;
    if (in_place != nullptr && reinterpret_cast<uintptr_t>(in_place) % alignof(float) == 0) {
      return absl::MakeConstSpan(reinterpret_cast<const float*>(in_place), numel);
    }
    grad.resize(numel);
    reader.Seek(c.offset);
    if (h.dtype == FP32) {
      reader.Copy(c.bytes, reinterpret_cast<char*>(grad.data()));
    } else {
      staging.resize(c.bytes);
      reader.Copy(c.bytes, staging.data());
      DecodeFloats(h.dtype, staging.data(), numel, grad.data());
    }
    return absl::MakeConstSpan(grad.data(), numel);
  });
  if (!st.ok()) return ToGrpc(st);
  bytes_in_ += bytes;
  if (segment != nullptr) shm_bytes_ += bytes;
  ++pushes_;
  return grpc::Status::OK;
}

bool PsService::Readable(const ChunkStore& store, const PullRequest& req) const {
  for (int32_t chunk : req.chunks()) {
    if (!store.Readable(chunk, req.min_clock())) return false;
  }
  return true;
}

grpc::Status PsService::FillPull(const ChunkStore& store, const PullRequest& req,
                                 grpc::ByteBuffer* resp) {
  const std::vector<int32_t> ids(req.chunks().begin(), req.chunks().end());
  std::shared_ptr<ShmSegment> segment;  // the payloads go there instead
  if (req.shm_segment() != 0) {
    if (const grpc::Status st = Segment(req.shm_segment(), &segment); !st.ok()) return st;
    // Only the newest attempt writes (its worker no longer reads an older one's answer).
    uint64_t newest = segment->newest_pull.load();
    do {
      if (req.shm_sequence() < newest) {
        return grpc::Status(grpc::StatusCode::ABORTED,
                            "pull: a newer pull of this worker's was answered");
      }
    } while (!segment->newest_pull.compare_exchange_weak(newest, req.shm_sequence()));
  }
  std::vector<int64_t> payload_bytes(ids.size());
  int64_t bytes = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    payload_bytes[i] = store.ChunkNumel(ids[i]) * DTypeSize(req.dtype());
    bytes += payload_bytes[i];
  }
  std::vector<int64_t> applied, min_applied;
  absl::Status read;
  const std::vector<int64_t> in_message =
      segment == nullptr ? payload_bytes : std::vector<int64_t>(ids.size(), 0);
  *resp = EncodePullResponse(
      ids, in_message,
      [&](size_t i, char* dst) {
        if (!read.ok()) return;
        if (segment != nullptr) {
          dst = segment->data() + shm_layout_.region_bytes() + shm_layout_.Offset(ids[i]);
        }
        read = store.Read(req.worker_id(), req.clock(), req.min_clock(), ids[i], req.dtype(), dst,
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
  if (!read.ok()) {  // the chunks' memory failed: the server is failing
    resp->Clear();
    return ToGrpc(absl::UnavailableError(absl::StrCat("pull: ", read.message())));
  }
  bytes_out_ += bytes;
  if (segment != nullptr) shm_bytes_ += bytes;
  ++pulls_;
  return grpc::Status::OK;
}

grpc::Status PsService::CheckPullRows(SparseTables& tables, const grpc::ByteBuffer& raw,
                                      PullRowsRequest* req) const {
  if (!ParseSmall(raw, req) || !DType_IsValid(req->dtype())) {
    tables.CountRefused();
    return Invalid("pull rows: malformed request (or an unknown dtype)");
  }
  return grpc::Status::OK;
}

grpc::Status PsService::FillPullRows(SparseTables& tables, const PullRowsRequest& req,
                                     grpc::ByteBuffer* resp) {
  // The rows go out in the slice they were pulled into (fp32), or encoded
  // once into 16-bit values.
  auto rows = std::make_unique<std::vector<float>>();
  const absl::Status st =
      tables.Pull(req.worker_id(), req.generation(), req.table(), req.ids(), rows.get());
  if (!st.ok()) return ToGrpc(absl::Status(st.code(), absl::StrCat("pull rows: ", st.message())));
  const int64_t values = static_cast<int64_t>(rows->size());
  const int64_t wire = values * static_cast<int64_t>(DTypeSize(req.dtype()));
  grpc::Slice payload;
  if (req.dtype() == FP32) {
    payload = SliceOf(std::move(rows));
  } else {
    payload = grpc::Slice(static_cast<size_t>(wire));
    EncodeFloats(req.dtype(), rows->data(), values,
                 reinterpret_cast<char*>(const_cast<uint8_t*>(payload.begin())));
  }
  bytes_out_ += wire;
  *resp = WithPayload(PullRowsResponse(), PullRowsResponse::kRowsFieldNumber, std::move(payload));
  return grpc::Status::OK;
}

grpc::Status PsService::DoPushRows(SparseTables& tables, const grpc::ByteBuffer& raw,
                                   grpc::ByteBuffer* resp) {
  // The gradients' bytes go straight into `grads` (their dtype may come
  // after them on the wire: 16-bit values are decoded once it is known).
  PushRowsRequest req;
  std::vector<float> grads;
  size_t wire = 0;
  absl::Status read = ReadWithPayload(
      raw, &req, PushRowsRequest::kGradsFieldNumber,
      [&](size_t bytes, const ReadPayload& read_payload) -> absl::Status {
        if (bytes > static_cast<size_t>(kMaxRowBytesPerRequest)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "push rows: ", bytes, " bytes of gradients are over ", kMaxRowBytesPerRequest));
        }
        wire = bytes;
        grads.resize((bytes + 3) / 4);
        if (!read_payload(grads.data(), bytes)) {
          return absl::InvalidArgumentError("malformed message: the gradients are cut short");
        }
        return absl::OkStatus();
      });
  if (read.ok() && !DType_IsValid(req.dtype())) read = absl::InvalidArgumentError("unknown dtype");
  if (!read.ok()) {
    tables.CountRefused();
    return Invalid(absl::StrCat("push rows: malformed request: ", read.message()));
  }
  const size_t width = DTypeSize(req.dtype());
  if (wire / width * sizeof(float) > static_cast<size_t>(kMaxRowBytesPerRequest)) {
    tables.CountRefused();
    return Invalid(absl::StrCat("push rows: ", wire / width, " gradient values are over ",
                                kMaxRowBytesPerRequest, " bytes"));
  }
  if (wire % width != 0) {
    tables.CountRefused();
    return Invalid(absl::StrCat("push rows: ", wire, " bytes of gradients are not ",
                                "whole values of ", width, " bytes"));
  }
  if (req.dtype() != FP32) {
    std::vector<float> decoded(wire / width);
    DecodeFloats(req.dtype(), reinterpret_cast<const char*>(grads.data()),
                 static_cast<int64_t>(decoded.size()), decoded.data());
    grads = std::move(decoded);
  }
  const absl::Status st = tables.Push(req.worker_id(), req.generation(), req.table(), req.clock(),
                                      req.num_samples(), req.ids(), grads);
  if (!st.ok()) return ToGrpc(absl::Status(st.code(), absl::StrCat("push rows: ", st.message())));
  bytes_in_ += static_cast<int64_t>(wire);
  *resp = SerializeSmall(PushRowsResponse());
  return grpc::Status::OK;
}

grpc::Status PsService::CheckPull(const ChunkStore& s, const grpc::ByteBuffer& raw,
                                  PullRequest* req) const {
  int64_t total_clocks;
  {
    absl::MutexLock lock(&mu_);
    total_clocks = total_clocks_;
  }
  // A pull names each of this server's chunks at most once: ~16 bytes each.
  const size_t limit = 64 + 16 * s.chunk_ids().size();
  if (raw.Length() > limit) {
    return Invalid(absl::StrCat("pull: a request of ", raw.Length(), " bytes for a server of ",
                                s.chunk_ids().size(), " chunks"));
  }
  if (!ParseSmall(raw, req)) return Invalid("pull: malformed request");
  if (!DType_IsValid(req->dtype())) {
    return Invalid(absl::StrCat("pull: unknown dtype ", req->dtype()));
  }
  if (req->chunks_size() == 0) return Invalid("pull: no chunks");
  if (req->worker_id() < 0 || req->worker_id() >= s.num_workers()) {
    return Invalid(absl::StrCat("pull: unknown worker ", req->worker_id()));
  }
  if (req->clock() < 0 || req->clock() > total_clocks) {
    return Invalid(absl::StrCat("pull: clock ", req->clock(), " outside [0, ", total_clocks, "]"));
  }
  if (req->min_clock() < 0 || req->min_clock() > total_clocks) {
    return Invalid(
        absl::StrCat("pull: min_clock ", req->min_clock(), " outside [0, ", total_clocks, "]"));
  }
  for (int32_t chunk : req->chunks()) {
    const absl::Status st = s.CheckChunk(chunk);
    if (!st.ok()) return ToGrpc(st);
  }
  // Each chunk at most once, so that the reply is never larger than the
  // server's weights.
  std::vector<int32_t> ids(req->chunks().begin(), req->chunks().end());
  std::sort(ids.begin(), ids.end());
  if (std::adjacent_find(ids.begin(), ids.end()) != ids.end()) {
    return Invalid("pull: a chunk is named twice");
  }
  return grpc::Status::OK;
}

// ---- Async glue ---------------------------------------------------------

// One call of any method, from its acceptance to its end. It is deleted
// when its last reference goes: one while it is handled or parked, one for
// each tag gRPC has yet to deliver (done once accepted, finished once
// answered). Whoever wins Claim() -- the handler, a wake-up, or the done tag
// of a cancelled call -- decides its end; only a winner other than the done
// tag answers.
class PsService::Call {
 public:
  enum Method { kPush, kPull, kStatus, kOpenShm, kPullRows, kPushRows };
  enum Event { kAccepted, kFinished, kDone };
  struct Tag {
    Call* call;
    Event event;
  };

  explicit Call(Method m) : method(m), raw_responder(&ctx) {}
  // A push or pull that came as a frame (PsService::Ring).
  Call(Method m, std::shared_ptr<ShmBell> b, uint64_t s)
      : method(m), bell(std::move(b)), seq(s), raw_responder(&ctx) {}

  void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
  bool Claim() { return !claimed_.exchange(true); }
  bool claimed() const { return claimed_.load(); }
  // A frame whose connection closed: its worker waits for no answer.
  bool abandoned() const { return bell != nullptr && bell->closed(); }

  // Sends the reply with `status`. Only after
  // winning Claim().
  void Answer(const grpc::Status& status) {
    if (method == kPush) ProcessLatencies().push.Observe(absl::Now() - accepted_at);
    if (method == kPull) ProcessLatencies().pull.Observe(absl::Now() - accepted_at);
    if (bell != nullptr) {  // no finished tag: the frame is out
      std::string body;
      if (status.ok()) body = FlattenSmall(reply);
      bell->Reply(seq, status.error_code(), status.error_message(), body);
      return;
    }
    Ref();  // for the finished tag
    if (status.ok()) {
      raw_responder.Finish(reply, status, &finished);
    } else {
      raw_responder.FinishWithError(status, &finished);
    }
  }

  const Method method;
  const std::shared_ptr<ShmBell> bell;  // a frame's connection; null: a gRPC call
  const uint64_t seq = 0;               // a frame's
  int64_t reply_bytes = 0;  // counted against the reply limit until sent
  grpc::ServerContext ctx;
  grpc::ByteBuffer request, reply;  // every method is raw
  PullRequest pull;                 // a pull's parsed request
  PullRowsRequest rows;             // a PullRows's parsed request
  absl::Time parked_at;             // a parked pull's
  absl::Time accepted_at;           // when gRPC handed the call over
  grpc::ServerAsyncResponseWriter<grpc::ByteBuffer> raw_responder;
  Tag accepted{this, kAccepted}, finished{this, kFinished}, done{this, kDone};

 private:
  std::atomic<int> refs_{1};
  std::atomic<bool> claimed_{false};
};

void PsService::Accept(int method, grpc::ServerCompletionQueue* cq) {
  absl::MutexLock lock(&accept_mu_);
  if (stopping_) return;
  auto* call = new Call(static_cast<Call::Method>(method));
  call->ctx.AsyncNotifyWhenDone(&call->done);  // delivered only if accepted
  switch (call->method) {
    case Call::kPush:
      RequestPush(&call->ctx, &call->request, &call->raw_responder, cq, cq, &call->accepted);
      break;
    case Call::kPull:
      RequestPull(&call->ctx, &call->request, &call->raw_responder, cq, cq, &call->accepted);
      break;
    case Call::kStatus:
      RequestStatus(&call->ctx, &call->request, &call->raw_responder, cq, cq, &call->accepted);
      break;
    case Call::kOpenShm:
      RequestOpenShm(&call->ctx, &call->request, &call->raw_responder, cq, cq, &call->accepted);
      break;
    case Call::kPullRows:
      RequestPullRows(&call->ctx, &call->request, &call->raw_responder, cq, cq, &call->accepted);
      break;
    case Call::kPushRows:
      RequestPushRows(&call->ctx, &call->request, &call->raw_responder, cq, cq, &call->accepted);
      break;
  }
}

void PsService::StopServing() {
  {
    absl::MutexLock lock(&accept_mu_);
    stopping_ = true;
  }
  // No frame after this either: the store may go once the calls are done.
  if (shm_ != nullptr) shm_->Stop();
}

void PsService::Serve(grpc::ServerCompletionQueue* cq) {
  // Several calls of each method asked for ahead, so that a burst of
  // arrivals finds them waiting.
  constexpr int kAhead = 8;
  for (int i = 0; i < kAhead; ++i) {
    Accept(Call::kPush, cq);
    Accept(Call::kPull, cq);
    Accept(Call::kPullRows, cq);
    Accept(Call::kPushRows, cq);
  }
  Accept(Call::kStatus, cq);
  Accept(Call::kOpenShm, cq);
  void* tag = nullptr;
  bool ok = false;
  while (cq->Next(&tag, &ok)) {
    const Call::Tag& t = *static_cast<Call::Tag*>(tag);
    Call* call = t.call;
    switch (t.event) {
      case Call::kAccepted:
        if (!ok) {  // the server is shutting down
          call->Unref();
          break;
        }
        call->Ref();  // for the done tag
        call->accepted_at = absl::Now();
        Accept(call->method, cq);
        Handle(call);
        break;
      case Call::kFinished:
        if (GiveReplyRoom(call)) WakePulls();
        call->Unref();
        break;
      case Call::kDone:
        // Answered, or cancelled: then a parked pull stays claimed and the
        // next wake-up drops it.
        call->Claim();
        call->Unref();
        break;
    }
  }
}

void PsService::Conclude(Call* call, const grpc::Status& st) {
  if (st.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
    refused_.fetch_add(1, std::memory_order_relaxed);
  }
  if (call->Claim()) call->Answer(st);
  call->Unref();
}

void PsService::Handle(Call* call) {
  std::shared_ptr<ChunkStore> s = store();
  if (call->method == Call::kStatus) {
    StatusRequest request;
    if (!ParseSmall(call->request, &request)) {
      Conclude(call, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                  "status: the request is not a StatusRequest"));
      return;
    }
    call->reply = SerializeSmall(GetStatus());
    Conclude(call, grpc::Status::OK);
    return;
  }
  if (call->method == Call::kOpenShm) {
    Conclude(call, GrantShm(call->request, &call->reply));
    return;
  }
  if (call->method == Call::kPullRows || call->method == Call::kPushRows) {
    HandleRows(call);
    return;
  }
  if (s == nullptr) {
    Conclude(call, grpc::Status(grpc::StatusCode::UNAVAILABLE, "server not ready"));
    return;
  }
  if (call->method == Call::kPush) {
    const grpc::Status st =
        DoPush(*s, call->request, call->bell == nullptr ? 0 : call->bell->segment());
    call->request.Clear();
    if (st.ok()) WakePulls();
    PushResponse response;
    response.set_window_bytes(push_window_.load(std::memory_order_relaxed));
    call->reply = SerializeSmall(response);
    Conclude(call, st);
    return;
  }
  HandlePull(*s, call);
}

void PsService::HandleRows(Call* call) {
  const std::shared_ptr<SparseTables> tables = this->tables();
  // Refusals are counted by the tables (row_requests_refused), not with the
  // chunks'.
  auto answer = [call](const grpc::Status& st) {
    if (call->Claim()) call->Answer(st);
    call->Unref();
  };
  if (tables == nullptr) {
    call->request.Clear();
    answer(grpc::Status(grpc::StatusCode::UNAVAILABLE, "server not ready"));
    return;
  }
  if (call->method == Call::kPushRows) {
    const grpc::Status st = DoPushRows(*tables, call->request, &call->reply);
    call->request.Clear();
    answer(st);
    if (st.ok()) WakeRowPulls(*tables);
    return;
  }
  grpc::Status st = CheckPullRows(*tables, call->request, &call->rows);
  call->request.Clear();
  if (st.ok()) {
    const PullRowsRequest& req = call->rows;
    const absl::Status checked =
        tables->CheckPull(req.worker_id(), req.generation(), req.table(), req.ids(),
                          req.min_clock());
    if (!checked.ok()) st = ToGrpc(absl::Status(checked.code(), absl::StrCat("pull rows: ",
                                                                             checked.message())));
  }
  if (!st.ok()) {
    answer(st);
    return;
  }
  {
    // Decided under parked_mu_, which a push's WakeRowPulls takes after its
    // round closed: a pull is never parked past the update it waits for.
    absl::MutexLock lock(&parked_mu_);
    // Checked under parked_mu_ too: a restore cancels the parked pulls after
    // it changed the generation, so no pull of an older one stays parked.
    if (!tables->Readable(call->rows.generation(), call->rows.table(), call->rows.min_clock())) {
      // A worker pulls each table once at a time: more is a client gone
      // wrong. (Those its clients cancelled go first.)
      int64_t mine = 0;
      for (auto it = parked_rows_.begin(); it != parked_rows_.end();) {
        Call* p = *it;
        if (p->claimed()) {
          it = parked_rows_.erase(it);
          p->Unref();
          continue;
        }
        mine += p->rows.worker_id() == call->rows.worker_id();
        ++it;
      }
      if (mine >= tables->size() + 16) {
        tables->CountRefused();
        answer(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                            absl::StrCat("pull rows: worker ", call->rows.worker_id(),
                                         " already has ", mine, " pulls waiting here")));
        return;
      }
      call->parked_at = absl::Now();
      parked_rows_.push_back(call);  // keeps the handling reference
      return;
    }
  }
  answer(FillPullRows(*tables, call->rows, &call->reply));
}

void PsService::WakeRowPulls(SparseTables& tables) {
  std::vector<Call*> ready;
  {
    absl::MutexLock lock(&parked_mu_);
    for (auto it = parked_rows_.begin(); it != parked_rows_.end();) {
      Call* call = *it;
      const PullRowsRequest& req = call->rows;
      if (call->claimed() || tables.Readable(req.generation(), req.table(), req.min_clock())) {
        ready.push_back(call);
        it = parked_rows_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (Call* call : ready) {
    if (call->Claim()) call->Answer(FillPullRows(tables, call->rows, &call->reply));
    call->Unref();
  }
}

void PsService::HandlePull(ChunkStore& s, Call* call) {
  grpc::Status st = CheckPull(s, call->request, &call->pull);
  call->request.Clear();
  if (st.ok() && call->bell != nullptr && call->pull.shm_segment() != call->bell->segment()) {
    st = Invalid("pull: a frame on a segment's socket names another segment");
  }
  if (!st.ok()) {
    Conclude(call, st);
    return;
  }
  absl::MutexLock lock(&parked_mu_);
  if (call->bell != nullptr) DropOlderPulls(*call);
  // Checked under parked_mu_: a restore cancels the parked pulls after it
  // changed the generation, so no pull of an older generation stays parked.
  if (const absl::Status generation = s.CheckGeneration(call->pull.generation());
      !generation.ok()) {
    Conclude(call, ToGrpc(generation));
    return;
  }
  if (Readable(s, call->pull) && TakeReplyRoom(s, call)) {
    Conclude(call, FillPull(s, call->pull, &call->reply));
    return;
  }
  // A worker's pulls name each chunk once: more parked than its chunks (and
  // some retries) is a client gone wrong, and would only grow.
  const int64_t limit = static_cast<int64_t>(s.chunk_ids().size()) + 64;
  int64_t mine = 0;
  for (const Call* p : parked_)
    mine += !p->claimed() && !p->abandoned() && p->pull.worker_id() == call->pull.worker_id();
  if (mine >= limit) {
    Conclude(call, grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                absl::StrCat("pull: worker ", call->pull.worker_id(),
                                             " already has ", mine, " pulls waiting here")));
    return;
  }
  call->parked_at = absl::Now();
  parked_.push_back(call);  // keeps the handling reference
}

void PsService::Ring(std::shared_ptr<ShmBell> bell, ShmFrame frame) {
  const ShmFrameHeader& h = frame.header;
  if (h.code != kShmPush && h.code != kShmPull) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    bell->Reply(h.seq, grpc::StatusCode::INVALID_ARGUMENT,
                absl::StrCat("shared memory: a frame of unknown method ", h.code), "");
    return;
  }
  ++shm_rings_;
  auto* call = new Call(h.code == kShmPush ? Call::kPush : Call::kPull, std::move(bell), h.seq);
  call->accepted_at = absl::Now();
  call->request = BufferOf(std::move(frame.body));
  Handle(call);
}

void PsService::DropOlderPulls(const Call& call) {
  for (Call* p : parked_) {
    if (p->bell == call.bell && p->pull.shm_sequence() < call.pull.shm_sequence() && p->Claim()) {
      p->Answer(grpc::Status(grpc::StatusCode::ABORTED,
                             "pull: a newer attempt of this worker's came"));
    }
  }
}

void PsService::WakePulls() {
  const std::shared_ptr<SparseTables> tables = this->tables();
  if (tables != nullptr) WakeRowPulls(*tables);
  std::shared_ptr<ChunkStore> s = store();
  if (s == nullptr) return;
  absl::MutexLock lock(&parked_mu_);
  for (auto it = parked_.begin(); it != parked_.end();) {
    Call* call = *it;
    if (call->abandoned()) call->Claim();  // its worker left
    if (call->claimed()) {  // cancelled while parked
      it = parked_.erase(it);
      call->Unref();
    } else if (Readable(*s, call->pull) && TakeReplyRoom(*s, call)) {
      if (call->Claim()) {
        call->Answer(FillPull(*s, call->pull, &call->reply));
      } else {  // cancelled meanwhile: no reply
        GiveReplyRoom(call);
      }
      it = parked_.erase(it);
      call->Unref();
    } else {
      ++it;
    }
  }
}

bool PsService::TakeReplyRoom(const ChunkStore& store, Call* call) {
  // A shared-memory pull's payloads go into its segment, not the reply.
  if (call->pull.shm_segment() != 0) return true;
  int64_t bytes = 0;
  for (int32_t chunk : call->pull.chunks()) {
    bytes += store.ChunkNumel(chunk) * DTypeSize(call->pull.dtype());
  }
  if (!replies_.Take(bytes)) return false;
  call->reply_bytes = bytes;
  return true;
}

bool PsService::GiveReplyRoom(Call* call) {
  if (call->reply_bytes == 0) return false;
  call->reply.Clear();
  replies_.Give(call->reply_bytes);
  call->reply_bytes = 0;
  return true;
}

void PsService::CancelParked(const grpc::Status& status, int64_t before) {
  absl::MutexLock lock(&parked_mu_);
  auto cancel = [&](std::vector<Call*>* parked, auto generation) {
    std::vector<Call*> kept;
    for (Call* call : *parked) {
      if (generation(*call) >= before && !call->claimed()) {
        kept.push_back(call);
        continue;
      }
      if (call->Claim()) call->Answer(status);
      call->Unref();
    }
    *parked = std::move(kept);
  };
  cancel(&parked_, [](const Call& c) { return c.pull.generation(); });
  cancel(&parked_rows_, [](const Call& c) { return c.rows.generation(); });
}

std::string PsService::ParkedWhat(const ChunkStore* s, const Call& call) const {
  const PullRequest& pull = call.pull;
  const std::string what = absl::StrCat("pull by worker ", pull.worker_id(), " of ",
                                        pull.chunks_size(), " chunks for clock ", pull.clock());
  if (s != nullptr && Readable(*s, pull)) {
    return absl::StrCat(what, ", waiting for room to reply (", replies_.in_use(), " of ",
                        replies_.limit(), " bytes of replies in flight)");
  }
  std::string lagging;
  for (int32_t chunk : pull.chunks()) {
    lagging = s == nullptr ? "" : s->Lagging(chunk, pull.min_clock());
    if (!lagging.empty()) break;
  }
  return absl::StrCat(what, ", waiting for every worker's updates before clock ",
                      pull.min_clock(), lagging.empty() ? "" : ": behind: ", lagging);
}

MemberStatus PsService::GetStatus() const {
  MemberStatus st;
  std::shared_ptr<ChunkStore> s;
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
  st.set_requests_refused(refused());
  const std::shared_ptr<SparseTables> tables = this->tables();
  if (tables != nullptr) {
    for (TableStatus& t : tables->Status()) *st.add_tables() = std::move(t);
    st.set_row_requests_refused(tables->refused());
    absl::MutexLock lock(&parked_mu_);
    for (const Call* call : parked_rows_) {
      if (call->claimed()) continue;
      for (TableStatus& t : *st.mutable_tables()) {
        if (t.name() == call->rows.table()) t.set_pulls_waiting(t.pulls_waiting() + 1);
      }
      Wait* w = st.add_waits();
      w->set_what(absl::StrCat("pull by worker ", call->rows.worker_id(), " of ",
                               call->rows.ids_size(), " rows of table '", call->rows.table(),
                               "', waiting for every worker's pushes before clock ",
                               call->rows.min_clock()));
      w->set_since_unix_ms(absl::ToUnixMillis(call->parked_at));
    }
  }
  st.set_shm_bytes(shm_bytes_);
  st.set_shm_rings(shm_rings_);
  st.set_shm_segments(shm_ == nullptr ? 0 : shm_->attached());
  st.set_shm_refused(shm_ == nullptr ? 0 : shm_->refused());
  st.set_rss_bytes(ResidentBytes());
  if (s != nullptr && s->NumParams() > 0) {
    st.set_params(s->NumParams());
    st.set_bytes_per_param(static_cast<double>(s->BytesHeld()) / s->NumParams());
  }
  st.set_nonfinite_skipped((s == nullptr ? 0 : s->NonfiniteSkipped()) +
                           (tables == nullptr ? 0 : tables->nonfinite_skipped()));
  if (s != nullptr) {
    st.set_generation(s->generation());
    st.set_checkpoint_clock(tables != nullptr ? tables->CheckpointClock(s->checkpoint_clock())
                                              : s->checkpoint_clock());
    const ChunkMemoryStats m = s->memory_stats();
    if (m.offloaded) {
      st.set_offload_resident_bytes(m.resident_bytes);
      st.set_offload_disk_bytes(m.disk_bytes);
      st.set_offload_direct(m.direct);
      st.set_offload_read_bytes(m.read_bytes);
      st.set_offload_write_bytes(m.write_bytes);
      st.set_offload_read_mb_per_s(m.read_s > 0 ? m.read_bytes / m.read_s / 1e6 : 0);
      st.set_offload_write_mb_per_s(m.write_s > 0 ? m.write_bytes / m.write_s / 1e6 : 0);
    }
  }
  st.set_test_accuracy(-1);
  {
    absl::MutexLock lock(&parked_mu_);
    for (const Call* call : parked_) {
      if (call->claimed() || call->abandoned()) continue;
      Wait* w = st.add_waits();
      w->set_what(ParkedWhat(s.get(), *call));
      w->set_since_unix_ms(absl::ToUnixMillis(call->parked_at));
    }
  }
  return st;
}

}  // namespace pstrain
