#include "server/ps_service.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/process_stats.h"
#include "common/refused.h"
#include "common/rpc.h"
#include "common/shm.h"
#include "common/status_macros.h"
#include "common/tensor_wire.h"
#include "server/handover_requests.h"
#include "server/standby_requests.h"

namespace pstrain {

PsService::PsService()
    : start_(absl::Now()),
      parked_chunks_([](const PsCall& c) { return c.pull.worker_id(); }),
      parked_rows_([](const PsCall& c) { return c.rows.worker_id(); }),
      parked_pushes_([](const PsCall& c) { return c.taken.worker; }),
      parked_row_pushes_([](const PsCall& c) { return c.row_push.worker_id(); }),
      early_pushes_([](const PsCall& c) { return c.early.worker; }) {}

PsService::~PsService() { shm_.reset(); }

void PsService::SetShard(std::shared_ptr<Shard> shard, int64_t total_clocks, ShmLayout shm_layout,
                         int64_t placement_version) {
  Shard* const asked = shard.get();
  auto chunks = std::make_shared<ChunkRequests>(
      shard->store(), total_clocks, std::move(shm_layout), shm_.get(), &counters_,
      [asked](int64_t clock) { asked->AskCheckpoint(clock); });
  auto rows = std::make_shared<RowRequests>(shard->tables(), &counters_);
  absl::MutexLock lock(&mu_);
  shard_ = std::move(shard);
  placement_version_ = placement_version;
  chunks_ = std::move(chunks);
  rows_ = std::move(rows);
  state_ = RUNNING;
}

void PsService::SetShm(std::unique_ptr<ShmRegistry> shm) {
  shm_ = std::move(shm);
  shm_->SetHandler([this](std::shared_ptr<ShmBell> bell, ShmFrame frame) {
    Ring(std::move(bell), std::move(frame));
  });
}

std::shared_ptr<ChunkRequests> PsService::chunks() const {
  absl::MutexLock lock(&mu_);
  return chunks_;
}

std::shared_ptr<Shard> PsService::shard() const {
  absl::MutexLock lock(&mu_);
  return shard_;
}

std::shared_ptr<RowRequests> PsService::rows() const {
  absl::MutexLock lock(&mu_);
  return rows_;
}

// ---- Accepting and dispatching ------------------------------------------

void PsService::Accept(PsCall::Method method, grpc::ServerCompletionQueue* cq) {
  absl::MutexLock lock(&accept_mu_);
  if (stopping_) return;
  auto* call = new PsCall(method);
  call->ctx.AsyncNotifyWhenDone(&call->done);  // delivered only if accepted
  switch (call->method) {
    case PsCall::kPush:
      RequestPush(&call->ctx, &call->request, &call->raw_responder, cq, cq, &call->accepted);
      break;
    case PsCall::kPull:
      RequestPull(&call->ctx, &call->request, &call->raw_responder, cq, cq, &call->accepted);
      break;
    case PsCall::kStatus:
      RequestStatus(&call->ctx, &call->request, &call->raw_responder, cq, cq, &call->accepted);
      break;
    case PsCall::kOpenShm:
      RequestOpenShm(&call->ctx, &call->request, &call->raw_responder, cq, cq, &call->accepted);
      break;
    case PsCall::kPullRows:
      RequestPullRows(&call->ctx, &call->request, &call->raw_responder, cq, cq, &call->accepted);
      break;
    case PsCall::kPushRows:
      RequestPushRows(&call->ctx, &call->request, &call->raw_responder, cq, cq, &call->accepted);
      break;
    case PsCall::kReadState:
      RequestReadState(&call->ctx, &call->request, &call->raw_responder, cq, cq, &call->accepted);
      break;
    case PsCall::kWriteState:
      RequestWriteState(&call->ctx, &call->request, &call->raw_responder, cq, cq, &call->accepted);
      break;
    case PsCall::kReplicate:
      RequestReplicate(&call->ctx, &call->request, &call->raw_responder, cq, cq, &call->accepted);
      break;
    case PsCall::kOfferViews:
      RequestOfferViews(&call->ctx, &call->request, &call->raw_responder, cq, cq, &call->accepted);
      break;
    case PsCall::kHandOver:
      RequestHandOver(&call->ctx, &call->request, &call->raw_responder, cq, cq, &call->accepted);
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
    Accept(PsCall::kPush, cq);
    Accept(PsCall::kPull, cq);
    Accept(PsCall::kPullRows, cq);
    Accept(PsCall::kPushRows, cq);
    Accept(PsCall::kReplicate, cq);
  }
  Accept(PsCall::kStatus, cq);
  Accept(PsCall::kOpenShm, cq);
  Accept(PsCall::kReadState, cq);
  Accept(PsCall::kWriteState, cq);
  Accept(PsCall::kOfferViews, cq);
  Accept(PsCall::kHandOver, cq);
  void* tag = nullptr;
  bool ok = false;
  while (cq->Next(&tag, &ok)) {
    const PsCall::Tag& t = *static_cast<PsCall::Tag*>(tag);
    PsCall* call = t.call;
    switch (t.event) {
      case PsCall::kAccepted:
        if (!ok) {  // the server is shutting down
          call->Unref();
          break;
        }
        call->Ref();  // for the done tag
        call->accepted_at = absl::Now();
        Accept(call->method, cq);
        Handle(call);
        break;
      case PsCall::kFinished:
        if (GiveReplyRoom(call)) WakePulls();
        call->Unref();
        break;
      case PsCall::kDone:
        // Answered, or cancelled: then a parked pull stays claimed and the
        // next wake-up drops it.
        call->Claim();
        call->Unref();
        break;
    }
  }
}

void PsService::Conclude(PsCall* call, const absl::Status& st) {
  if (absl::IsInvalidArgument(st)) {
    refused_.fetch_add(1, std::memory_order_relaxed);
  }
  call->Conclude(st);
}

void PsService::Handle(PsCall* call) {
  if (call->method == PsCall::kStatus) {
    StatusRequest request;
    if (!ParseSmall(call->request, &request)) {
      Conclude(call, absl::InvalidArgumentError("status: the request is not a StatusRequest"));
      return;
    }
    call->reply = SerializeSmall(GetStatus());
    Conclude(call, absl::OkStatus());
    return;
  }
  if (call->method == PsCall::kPullRows || call->method == PsCall::kPushRows) {
    const std::shared_ptr<RowRequests> rows = this->rows();
    if (rows == nullptr) {
      call->request.Clear();
      call->Conclude(absl::UnavailableError("server not ready"));
      return;
    }
    HandleRows(*rows, call);
    return;
  }
  const std::shared_ptr<ChunkRequests> chunks = this->chunks();
  if (chunks == nullptr) {
    Conclude(call, absl::UnavailableError("server not ready"));
    return;
  }
  switch (call->method) {
    case PsCall::kOpenShm:
      Conclude(call, chunks->GrantShm(call->request, &call->reply));
      return;
    case PsCall::kReadState:
      Conclude(call, chunks->ReadState(call->request, &call->reply));
      return;
    case PsCall::kWriteState:
      Conclude(call, chunks->WriteState(call->request, &call->reply));
      return;
    case PsCall::kOfferViews:
      Conclude(call, chunks->OfferViews(call->request, &call->reply));
      return;
    case PsCall::kHandOver:
      Conclude(call, AnswerHandOver(*shard(), call->request, &call->reply));
      return;
    case PsCall::kPush:
      HandlePush(*chunks, call);
      return;
    case PsCall::kReplicate: {
      const std::shared_ptr<RowRequests> rows = this->rows();
      const absl::Status st = AnswerReplicate(
          *chunks, rows == nullptr ? nullptr : &rows->tables(), call->request,
          [this](int home) { return ServingOf(home); }, &call->reply,
          call->bell == nullptr ? 0 : call->bell->segment());
      call->request.Clear();
      if (st.ok()) WakePulls();  // (a checkpoint the copy wrote changes nothing else)
      Conclude(call, st);
      return;
    }
    default:
      HandlePull(*chunks, call);
  }
}

void PsService::HandlePush(ChunkRequests& chunks, PsCall* call) {
  const uint64_t segment = call->bell == nullptr ? 0 : call->bell->segment();
  // Standby copies: a push of the clock after the one a chunk's open BSP
  // round still waits for (ChunkClocks::Early -- a promoted copy's round
  // cleared at the promotion, or the worker's own push of the clock before
  // still on its way) waits here, its request kept, until that round is
  // applied, and is then taken as if it came then (WakePushes). Answered
  // UNAVAILABLE instead, its retry waited at the worker for the rest of its
  // attempt -- behind a sibling call parked here for another worker's push,
  // which that worker held behind its own parked call waiting for this very
  // push: a cycle that only the 30 s attempt deadline broke, and then gave
  // the push up (chaos seed 2004).
  for (int tries = 0;; ++tries) {
    call->early = PushTaken();
    const absl::Status st =
        chunks.Push(call->request, segment, &call->taken, tries < 4 ? &call->early : nullptr);
    if (call->early.worker < 0) {
      FinishPush(chunks, call, st);
      return;
    }
    if (call->bell != nullptr) {
      // A retry on the same connection naming the same chunks: the older
      // one's worker no longer waits for it.
      early_pushes_.Cancel(absl::AbortedError("push: a newer attempt of this worker's came"),
                           [call](const PsCall& p) {
                             return p.bell == call->bell && p.seq < call->seq &&
                                    p.early.chunks == call->early.chunks;
                           });
    }
    const int64_t limit = static_cast<int64_t>(chunks.store().chunk_ids().size()) + kParkedSlack;
    const absl::StatusOr<bool> parked =
        early_pushes_.Park(call, limit, [&] { return !chunks.PushStillEarly(call->early); });
    if (!parked.ok()) {
      call->request.Clear();
      Conclude(call, Prefixed("push: ", parked.status()));
      return;
    }
    if (*parked) return;  // WakePushes hands it back
    // Due meanwhile: taken now.
  }
}

void PsService::FinishPush(ChunkRequests& chunks, PsCall* call, const absl::Status& st) {
  call->early = PushTaken();
  call->request.Clear();
  if (st.ok()) {
    WakePulls();
    // (A round it closed may be all a push of it waited for: no standby.)
    if (chunks.store().standby_copies() > 0) WakePushes();
  }
  PushResponse response;
  response.set_window_bytes(push_window_.load(std::memory_order_relaxed));
  call->reply = SerializeSmall(response);
  if (!st.ok() || PushReady(chunks, *call)) {
    Conclude(call, st.ok() ? PushAnswer(chunks, *call) : st);
    return;
  }
  // Standby copies: answered once the standby holds it (WakePushes).
  const int64_t limit = static_cast<int64_t>(chunks.store().chunk_ids().size()) + kParkedSlack;
  const absl::StatusOr<bool> parked =
      parked_pushes_.Park(call, limit, [&] { return PushReady(chunks, *call); });
  if (!parked.ok()) {
    Conclude(call, Prefixed("push: ", parked.status()));
    return;
  }
  if (!*parked) Conclude(call, PushAnswer(chunks, *call));
}

bool PsService::PushReady(const ChunkRequests& chunks, const PsCall& call) {
  return chunks.PushReplicated(call.taken) || !chunks.PushServed(call.taken);
}

absl::Status PsService::PushAnswer(const ChunkRequests& chunks, const PsCall& call) {
  if (chunks.PushReplicated(call.taken)) return absl::OkStatus();
  return absl::UnavailableError(
      "push: its chunks moved to another server before their standby had it");
}

void PsService::SetRoutes(const ServerRoutes& routes) {
  absl::MutexLock lock(&mu_);
  routes_ = routes;
}

int PsService::ServingOf(int home) const {
  absl::MutexLock lock(&mu_);
  return home >= 0 && home < routes_.serving_size() ? routes_.serving(home) : home;
}

void PsService::WakePushes() {
  if (const std::shared_ptr<RowRequests> r = rows(); r != nullptr) {
    parked_row_pushes_.Wake([&](PsCall& call) { return RowPushReady(*r, call); },
                            [&](PsCall& call) { call.Answer(RowPushAnswer(*r, call)); });
  }
  const std::shared_ptr<ChunkRequests> c = chunks();
  if (c == nullptr) return;
  parked_pushes_.Wake([&](PsCall& call) { return PushReady(*c, call); },
                      [&](PsCall& call) { call.Answer(PushAnswer(*c, call)); });
  // Early pushes whose round before was applied (or that could no longer
  // be taken here, refused then as any push): handled again now.
  for (PsCall* call :
       early_pushes_.Release([&](PsCall& call) { return !c->PushStillEarly(call.early); })) {
    HandlePush(*c, call);
  }
}

void PsService::HandlePull(ChunkRequests& chunks, PsCall* call) {
  absl::Status st = chunks.CheckPull(call->request, &call->pull);
  call->request.Clear();
  if (st.ok() && call->bell != nullptr && call->pull.shm_segment() != call->bell->segment()) {
    st = absl::InvalidArgumentError("pull: a frame on a segment's socket names another segment");
  }
  if (!st.ok()) {
    Conclude(call, st);
    return;
  }
  if (call->bell != nullptr) {
    // Its worker no longer waits for the parked pulls of its older attempts
    // (no cancellation comes on a socket, as gRPC's would).
    parked_chunks_.Cancel(
        absl::AbortedError("pull: a newer attempt of this worker's came"), [call](const PsCall& p) {
          return p.bell == call->bell && p.pull.shm_sequence() < call->pull.shm_sequence();
        });
  }
  const int64_t limit = static_cast<int64_t>(chunks.store().chunk_ids().size()) + kParkedSlack;
  const absl::StatusOr<bool> parked =
      parked_chunks_.Park(call, limit, [&] { return ChunkPullReady(chunks, *call); });
  if (!parked.ok()) {
    Conclude(call, Prefixed("pull: ", parked.status()));
    return;
  }
  if (*parked) return;
  const absl::Status generation = chunks.store().CheckGeneration(call->pull.generation());
  Conclude(call, generation.ok() ? chunks.FillPull(call->pull, &call->reply) : generation);
}

bool PsService::ChunkPullReady(ChunkRequests& chunks, PsCall& call) {
  // A pull of another generation is answered (refused), never parked: a
  // restore cancels the parked ones after it changed the generation. So
  // is one of chunks this server no longer serves (standby copies).
  if (!chunks.store().CheckGeneration(call.pull.generation()).ok()) return true;
  if (!chunks.PullServed(call.pull)) return true;
  if (!chunks.Readable(call.pull)) return false;
  const int64_t bytes = chunks.ReplyBytes(call.pull);
  if (bytes > 0 && !replies_.Take(bytes)) return false;
  call.reply_bytes = bytes;
  return true;
}

bool PsService::GiveReplyRoom(PsCall* call) {
  if (call->reply_bytes == 0) return false;
  call->reply.Clear();
  replies_.Give(call->reply_bytes);
  call->reply_bytes = 0;
  return true;
}

void PsService::HandleRows(RowRequests& rows, PsCall* call) {
  // Refusals are counted by the tables (refused["rows"]), not with the
  // chunks'.
  if (call->method == PsCall::kPushRows) {
    HandleRowPush(rows, call);
    return;
  }
  const absl::Status st = rows.CheckPull(call->request, &call->rows);
  call->request.Clear();
  if (!st.ok()) {
    call->Conclude(st);
    return;
  }
  // A worker pulls each table once at a time.
  const int64_t limit = rows.tables().size() + kParkedSlack;
  const absl::StatusOr<bool> parked =
      parked_rows_.Park(call, limit, [&] { return rows.Readable(call->rows); });
  if (!parked.ok()) {
    rows.tables().CountRefused();
    call->Conclude(Prefixed("pull rows: ", parked.status()));
    return;
  }
  if (*parked) return;
  call->Conclude(rows.FillPull(call->rows, &call->reply));
}

void PsService::HandleRowPush(RowRequests& rows, PsCall* call) {
  const absl::Status st = rows.Push(call->request, &call->reply, &call->row_push);
  call->request.Clear();
  if (st.ok()) WakeRowPulls(rows);
  // (A round it closed may be all another push waited for: no standby.)
  if (st.ok() && rows.tables().standby_copies() > 0) WakePushes();
  if (!st.ok() || RowPushReady(rows, *call)) {
    call->Conclude(st.ok() ? RowPushAnswer(rows, *call) : st);
    return;
  }
  // Standby copies: answered once the standby holds it (WakePushes).
  const int64_t limit = rows.tables().size() + kParkedSlack;
  const absl::StatusOr<bool> parked =
      parked_row_pushes_.Park(call, limit, [&] { return RowPushReady(rows, *call); });
  if (!parked.ok()) {
    call->Conclude(Prefixed("push rows: ", parked.status()));
    return;
  }
  if (!*parked) call->Conclude(RowPushAnswer(rows, *call));
}

bool PsService::RowPushReady(const RowRequests& rows, const PsCall& call) {
  return rows.PushReplicated(call.row_push) || !rows.PushServed(call.row_push);
}

absl::Status PsService::RowPushAnswer(const RowRequests& rows, const PsCall& call) {
  if (rows.PushReplicated(call.row_push)) return absl::OkStatus();
  return absl::UnavailableError(
      "push rows: the table's rows moved to another server before their standby "
      "had the push");
}

void PsService::Ring(std::shared_ptr<ShmBell> bell, ShmFrame frame) {
  const ShmFrameHeader& h = frame.header;
  if (h.code != kShmPush && h.code != kShmPull && h.code != kShmReplicate) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    bell->Reply(h.seq, grpc::StatusCode::INVALID_ARGUMENT,
                absl::StrCat("shared memory: a frame of unknown method ", h.code), "");
    return;
  }
  ++counters_.shm_rings;
  const PsCall::Method method = h.code == kShmPush   ? PsCall::kPush
                                : h.code == kShmPull ? PsCall::kPull
                                                     : PsCall::kReplicate;
  auto* call = new PsCall(method, std::move(bell), h.seq);
  call->accepted_at = absl::Now();
  call->request = BufferOf(std::move(frame.body));
  Handle(call);
}

// ---- Wake-ups and cancellations -------------------------------------------

void PsService::WakePulls() {
  if (const std::shared_ptr<RowRequests> r = rows(); r != nullptr) WakeRowPulls(*r);
  if (const std::shared_ptr<ChunkRequests> c = chunks(); c != nullptr) WakeChunkPulls(*c);
}

void PsService::WakeChunkPulls(ChunkRequests& chunks) {
  parked_chunks_.Wake(
      [&](PsCall& call) { return ChunkPullReady(chunks, call); },
      [&](PsCall& call) {
        absl::Status refused = chunks.store().CheckGeneration(call.pull.generation());
        if (refused.ok() && !chunks.PullServed(call.pull)) {
          refused = absl::UnavailableError("pull: its chunks moved to another server");
        }
        call.Answer(refused.ok() ? chunks.FillPull(call.pull, &call.reply) : refused);
      },
      [this](PsCall& call) { GiveReplyRoom(&call); });
}

void PsService::WakeRowPulls(RowRequests& rows) {
  parked_rows_.Wake([&](PsCall& call) { return rows.Readable(call.rows); },
                    [&](PsCall& call) { call.Answer(rows.FillPull(call.rows, &call.reply)); });
}

void PsService::CancelParked(const absl::Status& status, int64_t before) {
  parked_chunks_.Cancel(status, [before](const PsCall& c) { return c.pull.generation() < before; });
  parked_rows_.Cancel(status, [before](const PsCall& c) { return c.rows.generation() < before; });
  parked_pushes_.Cancel(status, [before](const PsCall& c) { return c.taken.generation < before; });
  early_pushes_.Cancel(status, [before](const PsCall& c) { return c.early.generation < before; });
  parked_row_pushes_.Cancel(status,
                            [before](const PsCall& c) { return c.row_push.generation() < before; });
}

}  // namespace pstrain
