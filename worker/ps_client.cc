#include "worker/ps_client.h"

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/logging.h"
#include "common/retry.h"
#include "common/rpc.h"
#include "common/status_macros.h"
#include "common/tensor_wire.h"
#include "proto/ps.pb.h"
#include "worker/shm_link.h"

namespace pstrain {
namespace {

// A pull may wait for slower workers (the read guarantee); one attempt waits
// this long before the client asks again.
constexpr absl::Duration kPullAttempt = absl::Seconds(30);
constexpr absl::Duration kPushAttempt = absl::Seconds(30);
// How often calls under way ask whether they were abandoned.
constexpr std::chrono::milliseconds kAbandonPoll(100);
const char kPushMethod[] = "/pstrain.ParameterServer/Push";
const char kPullMethod[] = "/pstrain.ParameterServer/Pull";
// Frames under way at once in one attempt (a few dozen bytes each answer).
constexpr int kMaxRingsUnderWay = 64;
// Attempts to attach a server's shared memory in one client's life (at
// most one per attempt of calls).
constexpr int kShmTries = 10;

}  // namespace

// One call: a batch of one server's chunks.
struct PsClient::Call {
  bool is_pull = false;
  int server = 0;
  int channel = 0;
  // Builds the request for the path its server takes: through the shared
  // memory `link` (a push writes its payloads there), or with the payloads
  // in the message (null).
  std::function<grpc::ByteBuffer(ShmLink* link)> encode;
  grpc::ByteBuffer request;
  bool encoded = false;
  ShmLink* link = nullptr;  // what `request` was encoded for
  // Checks and consumes a reply (on the calling thread); `link` as above.
  std::function<absl::Status(const grpc::ByteBuffer&, const ShmLink* link)> finish;
  bool done = false;
};

PsClient::PsClient(const ClusterView& cluster, const Partition* partition, int worker_id,
                   PsClientOptions options)
    : partition_(partition), worker_id_(worker_id), options_(options) {
  const int channels = std::max(1, options_.channels_per_server);
  for (const Member& s : cluster.servers()) {
    addresses_.push_back(s.address());
    push_window_.push_back(0);  // one push at a time until the server says
    stubs_.emplace_back();
    for (int c = 0; c < channels; ++c) {
      stubs_.back().push_back(std::make_unique<grpc::GenericStub>(MakeBulkChannel(s.address())));
    }
  }
  for (int s = 0; s < static_cast<int>(stubs_.size()); ++s) {
    std::vector<int32_t> mine;
    for (int32_t id : partition_->ServerChunks(s)) {
      if (Trains(partition_->chunks()[id].param)) mine.push_back(id);
    }
    batches_.push_back(Pack(mine));
    std::vector<std::pair<int32_t, int64_t>> layout;
    for (int32_t id : partition_->ServerChunks(s)) {
      layout.push_back({id, partition_->chunks()[id].numel});
    }
    shm_layouts_.push_back(ShmLayout::Make(std::move(layout)));
    shm_.emplace_back();
    shm_tries_.push_back(options_.shm ? 0 : kShmTries);
    shm_asked_in_.push_back(0);
  }
}

PsClient::~PsClient() = default;

ShmLink* PsClient::Link(int s) {
  if (shm_[s] != nullptr || shm_tries_[s] >= kShmTries || shm_asked_in_[s] == attempts_) {
    return shm_[s].get();
  }
  ++shm_tries_[s];
  shm_asked_in_[s] = attempts_;
  absl::StatusOr<std::unique_ptr<ShmLink>> link =
      ShmLink::Open(addresses_[s], worker_id_, shm_layouts_[s]);
  if (!link.ok()) {
    // Another host or network namespace, or shared memory turned off: for
    // good. Anything else (not ready yet) is asked again in a later attempt.
    if (absl::IsFailedPrecondition(link.status())) shm_tries_[s] = kShmTries;
    spdlog::info("server {}: payloads in the messages ({})", s, link.status().message());
    return nullptr;
  }
  spdlog::info("server {}: payloads through shared memory (segment of {} bytes)", s,
               shm_layouts_[s].segment_bytes());
  shm_[s] = std::move(*link);
  ++shm_segments_;
  return shm_[s].get();
}

void PsClient::LoseLink(int s, ShmLink* link) {
  if (link == nullptr || shm_[s].get() != link) return;
  spdlog::warn("server {} lost its shared-memory segment: payloads in the messages", s);
  lost_shm_.push_back(std::move(shm_[s]));
  --shm_segments_;
}

void PsClient::Prepare(Call& call) {
  ShmLink* link = Link(call.server);
  // A pull through shared memory names its attempt (PullRequest.shm_sequence).
  if (call.encoded && call.link == link && !(call.is_pull && link != nullptr)) return;
  call.request = call.encode(link);
  call.link = link;
  call.encoded = true;
}

std::vector<std::vector<int32_t>> PsClient::Pack(const std::vector<int32_t>& chunks) const {
  const int width = DTypeSize(options_.wire_dtype);
  std::vector<std::vector<int32_t>> batches;
  int64_t bytes = 0;
  for (int32_t id : chunks) {
    const int64_t chunk_bytes = partition_->chunks()[id].numel * width;
    if (batches.empty() || bytes + chunk_bytes > options_.max_request_bytes * 5 / 4) {
      batches.emplace_back();
      bytes = 0;
    }
    batches.back().push_back(id);
    bytes += chunk_bytes;
  }
  return batches;
}

absl::Status PsClient::RunCalls(std::vector<Call>& calls) {
  int next_channel = 0;
  bool only_waiting = false;  // the last attempt's failures: pulls that waited out their deadline
  RetryPolicy policy;
  policy.window = options_.retry_window;
  // A pull that waited out its attempt is still waiting for slower workers:
  // ask again at once, without counting it against the retry window.
  policy.classify = [&](const absl::Status& st) {
    if (only_waiting) return RetryAction::kRetryNow;
    return IsRetryable(st) ? RetryAction::kRetry : RetryAction::kStop;
  };
  policy.abandon = [this] {
    return options_.abandon && options_.abandon()
               ? absl::AbortedError("given up: the job ended or the cluster rolls back")
               : absl::OkStatus();
  };
  policy.on_retry = [&](const absl::Status& st, int) {
    if (only_waiting) {
      spdlog::info("{}", st.message());
    } else {
      spdlog::warn("retrying: {}", st.message());
    }
  };
  const absl::Status st =
      Retry(policy, [&] { return Attempt(calls, &next_channel, &only_waiting); });
  lost_shm_.clear();  // no call holds them any more
  return st;
}

// One attempt's calls under way: started, completed, and the pushes held
// back by their server's window (PushResponse.window_bytes).
struct PsClient::Flight {
  std::vector<Call>& calls;
  std::vector<absl::Status> results;
  std::vector<grpc::Status> statuses;
  std::vector<grpc::ByteBuffer> replies;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::GenericClientAsyncResponseReader>> readers;
  std::vector<int64_t> push_bytes;  // per server, of the pushes under way
  std::deque<int> held;             // pushes waiting for room, in order
  grpc::CompletionQueue cq;
  int running = 0;
  // The calls go as frames on their segments' sockets, not gRPC calls.
  bool bell = false;
  std::vector<uint64_t> seq;         // a frame's
  std::vector<absl::Time> deadline;  // a frame's attempt ends
  std::vector<char> live;            // a frame sent and not yet answered
  explicit Flight(std::vector<Call>& c, size_t servers)
      : calls(c),
        results(c.size()),
        statuses(c.size()),
        replies(c.size()),
        contexts(c.size()),
        readers(c.size()),
        push_bytes(servers, 0),
        seq(c.size(), 0),
        deadline(c.size()),
        live(c.size(), 0) {}
};

bool PsClient::Admit(Flight& f, int i) const {
  const Call& call = f.calls[i];
  // Frames under way are bounded: their answers wait in the socket until
  // this thread reads them, and a server drops a connection whose answer
  // does not fit (a tensor of gigabytes is thousands of calls).
  if (f.bell && f.running >= kMaxRingsUnderWay) return false;
  if (call.is_pull) return true;
  const int64_t bytes = static_cast<int64_t>(call.request.Length());
  int64_t& under_way = f.push_bytes[call.server];
  // A push goes when it fits the window, or alone.
  if (under_way > 0 && bytes > push_window_[call.server] - under_way) return false;
  under_way += bytes;
  return true;
}

void PsClient::Launch(Flight& f, int i, int* next_channel) {
  if (f.bell) {
    Ring(f, i);
    return;
  }
  Call& call = f.calls[i];
  std::vector<std::unique_ptr<grpc::GenericStub>>& channels = stubs_[call.server];
  call.channel = (*next_channel)++ % static_cast<int>(channels.size());
  f.contexts[i] = ContextWithTimeout(call.is_pull ? kPullAttempt : kPushAttempt);
  f.readers[i] = channels[call.channel]->PrepareUnaryCall(
      f.contexts[i].get(), call.is_pull ? kPullMethod : kPushMethod, call.request, &f.cq);
  f.readers[i]->StartCall();
  f.readers[i]->Finish(&f.replies[i], &f.statuses[i],
                       reinterpret_cast<void*>(static_cast<intptr_t>(i)));
  ++f.running;
  ++rpcs_;
}

void PsClient::Ring(Flight& f, int i) {
  Call& call = f.calls[i];
  f.seq[i] = ++next_seq_;
  f.deadline[i] = absl::Now() + (call.is_pull ? kPullAttempt : kPushAttempt);
  f.live[i] = 1;
  ++f.running;
  ++rpcs_;
  ++shm_rings_;
  const absl::Status st =
      call.link->Ring(call.is_pull ? kShmPull : kShmPush, f.seq[i], FlattenSmall(call.request));
  if (!st.ok()) {  // ended by AwaitRings at once; the next attempt goes by gRPC
    f.statuses[i] = grpc::Status(grpc::StatusCode::UNAVAILABLE, std::string(st.message()));
    f.deadline[i] = absl::InfinitePast();
    LoseLink(call.server, call.link);
  }
}

void PsClient::EndRings(Flight& f, const ShmLink* link, const grpc::Status& status) {
  for (int i = 0; i < static_cast<int>(f.calls.size()); ++i) {
    if (!f.live[i] || (link != nullptr && f.calls[i].link != link)) continue;
    f.statuses[i] = status;
    Complete(f, i);
  }
}

void PsClient::AwaitRings(Flight& f, int* next_channel) {
  std::vector<ShmLink*> links;
  for (const Call& call : f.calls) {
    if (call.link != nullptr && std::find(links.begin(), links.end(), call.link) == links.end()) {
      links.push_back(call.link);
    }
  }
  absl::Time abandon_check = absl::Now() + absl::FromChrono(kAbandonPoll);
  while (f.running > 0) {
    const absl::Time now = absl::Now();
    absl::Time wake = abandon_check;
    for (size_t i = 0; i < f.calls.size(); ++i) {
      if (f.live[i]) wake = std::min(wake, f.deadline[i]);
    }
    std::vector<pollfd> fds;
    for (const ShmLink* link : links) fds.push_back({link->fd(), POLLIN, 0});
    const int64_t ms = std::max<int64_t>(0, absl::ToInt64Milliseconds(wake - now) + 1);
    if (wake > now) poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(ms, 1000)));
    for (size_t k = 0; k < links.size(); ++k) {
      if (fds[k].revents == 0) continue;
      const absl::Status st = links[k]->TakeReplies([&](const ShmFrame& frame) {
        for (int i = 0; i < static_cast<int>(f.calls.size()); ++i) {
          if (!f.live[i] || f.seq[i] != frame.header.seq) continue;
          f.statuses[i] =
              frame.header.code == 0
                  ? grpc::Status::OK
                  : grpc::Status(static_cast<grpc::StatusCode>(frame.header.code), frame.message);
          f.replies[i] = BufferOf(frame.body);
          Complete(f, i);
        }
      });
      if (!st.ok()) {  // the server went, or dropped the segment
        EndRings(f, links[k], grpc::Status(grpc::StatusCode::UNAVAILABLE, std::string(st.message())));
        for (const Call& call : f.calls) {
          if (call.link == links[k]) LoseLink(call.server, links[k]);
        }
        links.erase(links.begin() + static_cast<std::ptrdiff_t>(k));
        break;  // fds no longer matches links
      }
    }
    for (int i = 0; i < static_cast<int>(f.calls.size()); ++i) {
      if (!f.live[i] || f.deadline[i] > absl::Now()) continue;
      if (f.statuses[i].ok()) {
        f.statuses[i] = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "no answer in time");
      }
      Complete(f, i);
    }
    if (absl::Now() >= abandon_check) {
      abandon_check = absl::Now() + absl::FromChrono(kAbandonPoll);
      if (options_.abandon && options_.abandon()) {
        for (int i : f.held) f.results[i] = absl::AbortedError("given up before it was sent");
        f.held.clear();
        EndRings(f, nullptr, grpc::Status(grpc::StatusCode::ABORTED, "given up"));
      }
    }
    LaunchHeld(f, next_channel);
  }
}

// Starts the held pushes that fit now, in order.
void PsClient::LaunchHeld(Flight& f, int* next_channel) {
  for (auto it = f.held.begin(); it != f.held.end();) {
    if (Admit(f, *it)) {
      Launch(f, *it, next_channel);
      it = f.held.erase(it);
    } else {
      ++it;
    }
  }
}

void PsClient::Complete(Flight& f, int i) {
  Call& call = f.calls[i];
  --f.running;
  f.live[i] = 0;
  if (!call.is_pull) {
    f.push_bytes[call.server] -= static_cast<int64_t>(call.request.Length());
    PushResponse response;
    if (f.statuses[i].ok() && ParseSmall(f.replies[i], &response)) {
      push_window_[call.server] = response.window_bytes() > 0
                                      ? response.window_bytes()
                                      : std::numeric_limits<int64_t>::max();
    }
  }
  if (f.statuses[i].error_code() == grpc::StatusCode::NOT_FOUND && call.link != nullptr) {
    // The server does not know the segment: ask again with the payloads.
    LoseLink(call.server, call.link);
    f.results[i] = absl::UnavailableError(f.statuses[i].error_message());
    return;
  }
  f.results[i] = f.statuses[i].ok() ? call.finish(f.replies[i], call.link)
                                    : FromGrpc(f.statuses[i]);
}

absl::Status PsClient::Attempt(std::vector<Call>& calls, int* next_channel, bool* only_waiting) {
  std::vector<int> todo;
  for (int i = 0; i < static_cast<int>(calls.size()); ++i) {
    if (!calls[i].done) todo.push_back(i);
  }
  // The calls complete on a queue this thread drains itself: no gRPC
  // thread takes the replies, so no hand-off between threads per call.
  Flight f(calls, stubs_.size());
  ++attempts_;
  for (int i : todo) Prepare(calls[i]);
  f.bell = options_.shm_doorbell &&
           std::all_of(todo.begin(), todo.end(), [&](int i) { return calls[i].link != nullptr; });
  for (int i : todo) {
    if (Admit(f, i)) {
      Launch(f, i, next_channel);
    } else {
      f.held.push_back(i);
    }
  }
  if (f.bell) AwaitRings(f, next_channel);
  // Waits in slices, so that calls the caller gave up on (the job ended,
  // the cluster rolls back) are cancelled at once instead of running out
  // their deadline against a server that may never answer.
  bool cancelled = false;
  while (f.running > 0) {
    void* tag = nullptr;
    bool ok = false;
    const grpc::CompletionQueue::NextStatus next =
        f.cq.AsyncNext(&tag, &ok, std::chrono::system_clock::now() + kAbandonPoll);
    if (next == grpc::CompletionQueue::SHUTDOWN) break;
    if (next == grpc::CompletionQueue::TIMEOUT) {
      if (!cancelled && options_.abandon && options_.abandon()) {
        cancelled = true;
        for (int i : f.held) f.results[i] = absl::AbortedError("given up before it was sent");
        f.held.clear();
        for (int i : todo) {
          if (f.contexts[i] != nullptr) f.contexts[i]->TryCancel();
        }
      }
      continue;
    }
    Complete(f, static_cast<int>(reinterpret_cast<intptr_t>(tag)));
    LaunchHeld(f, next_channel);
  }
  f.cq.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (f.cq.Next(&tag, &ok)) {
  }
  return Settle(calls, f.results, todo, only_waiting);
}

absl::Status PsClient::Settle(std::vector<Call>& calls, const std::vector<absl::Status>& results,
                              const std::vector<int>& todo, bool* only_waiting) {
  absl::Status retryable, waiting;
  for (int i : todo) {
    const absl::Status& st = results[i];
    if (st.ok()) {
      calls[i].done = true;
      continue;
    }
    const absl::Status named(st.code(),
                             absl::StrCat(calls[i].is_pull ? "pull from" : "push to", " server ",
                                          calls[i].server, ": ", st.message()));
    if (calls[i].is_pull && absl::IsDeadlineExceeded(st)) {
      if (waiting.ok()) {
        waiting = absl::DeadlineExceededError(absl::StrCat(
            "pull from server ", calls[i].server, " still waiting for its read guarantee"));
      }
    } else if (!IsRetryable(st)) {
      *only_waiting = false;
      return named;
    } else if (retryable.ok()) {
      retryable = named;
    }
  }
  *only_waiting = retryable.ok() && !waiting.ok();
  if (!retryable.ok()) return retryable;
  return waiting;
}

void PsClient::AddPullCalls(int64_t clock, int64_t min_clock,
                            std::vector<std::vector<float>>* weights, PullState* state,
                            std::vector<Call>* calls) {
  const DType dtype = options_.wire_dtype;
  for (int s = 0; s < static_cast<int>(batches_.size()); ++s) {
    for (const std::vector<int32_t>& batch : batches_[s]) {
      PullRequest req;
      req.set_worker_id(worker_id_);
      req.set_clock(clock);
      req.set_min_clock(min_clock);
      req.set_dtype(dtype);
      req.set_generation(options_.generation);
      for (int32_t id : batch) req.add_chunks(id);
      Call call;
      call.is_pull = true;
      call.server = s;
      call.encode = [this, req](ShmLink* link) mutable {
        req.set_shm_segment(link == nullptr ? 0 : link->id());
        req.set_shm_sequence(link == nullptr ? 0 : attempts_);
        return SerializeSmall(req);
      };
      state->applied.emplace_back();
      const size_t index = state->applied.size() - 1;
      call.finish = [this, s, &batch, weights, state, index](const grpc::ByteBuffer& reply,
                                                             const ShmLink* link) {
        return TakePullReply(s, batch, reply, link, weights, &state->applied[index],
                             &state->bytes);
      };
      calls->push_back(std::move(call));
    }
  }
}

absl::Status PsClient::TakePullReply(int s, const std::vector<int32_t>& batch,
                                     const grpc::ByteBuffer& reply, const ShmLink* link,
                                     std::vector<std::vector<float>>* weights,
                                     std::vector<int64_t>* applied, std::atomic<int64_t>* bytes) {
  const DType dtype = options_.wire_dtype;
  const int width = DTypeSize(dtype);
  SliceReader reader(reply);
  std::vector<PayloadRef> refs;
  RETURN_IF_ERROR(DecodePullResponse(reader, &refs, applied));
  if (refs.size() != batch.size()) {
    return absl::DataLossError(absl::StrCat("pull from server ", s, ": ", refs.size(),
                                            " chunks, asked for ", batch.size()));
  }
  thread_local std::vector<char> staging;
  for (size_t k = 0; k < refs.size(); ++k) {
    const PayloadRef& ref = refs[k];
    if (ref.chunk != batch[k]) {
      return absl::DataLossError(absl::StrCat("pull from server ", s, ": chunk ", ref.chunk,
                                              " where ", batch[k], " was asked for"));
    }
    const ChunkInfo& info = partition_->chunks()[ref.chunk];
    const size_t expected = link != nullptr ? 0 : static_cast<size_t>(info.numel) * width;
    if (ref.bytes != expected) {
      return absl::DataLossError(absl::StrCat("pull from server ", s, ": chunk ", ref.chunk,
                                              " has ", ref.bytes, " bytes, expected ", expected));
    }
    const size_t payload = static_cast<size_t>(info.numel) * width;
    float* dst = (*weights)[info.param - options_.first_param].data() + info.offset;
    const char* src = nullptr;
    if (link != nullptr) {
      src = link->PullSlot(ref.chunk);
    } else if (dtype != FP32) {
      staging.resize(payload);
      reader.Seek(ref.offset);
      reader.Copy(payload, staging.data());
      src = staging.data();
    }
    if (src == nullptr) {  // fp32 in the message
      reader.Seek(ref.offset);
      reader.Copy(payload, reinterpret_cast<char*>(dst));
    } else if (dtype == FP32) {
      std::memcpy(dst, src, payload);
    } else {
      DecodeFloats(dtype, src, info.numel, dst);
    }
    *bytes += static_cast<int64_t>(payload);
    if (link != nullptr) shm_bytes_ += static_cast<int64_t>(payload);
  }
  return absl::OkStatus();
}

void PsClient::FinishPull(const PullState& state, std::vector<int64_t>* applied) {
  if (applied != nullptr) {
    applied->clear();
    for (const std::vector<int64_t>& a : state.applied) {
      if (applied->empty()) *applied = a;
      for (size_t w = 0; w < a.size() && w < applied->size(); ++w) {
        (*applied)[w] = std::min((*applied)[w], a[w]);
      }
    }
  }
  bytes_in_ += state.bytes;
}

void PsClient::WriteToShm(DType dtype, const std::vector<PushChunk>& chunks,
                          const ShmLink& link) {
  for (const PushChunk& c : chunks) {
    char* slot = link.PushSlot(c.chunk);
    if (dtype == FP32) {
      std::memcpy(slot, c.values, c.numel * sizeof(float));
    } else {
      EncodeFloats(dtype, c.values, c.numel, slot);
    }
  }
}

PushHeader PsClient::Header(int64_t clock, int num_samples, float grad_norm) {
  PushHeader header;
  header.worker_id = worker_id_;
  header.clock = clock;
  header.num_samples = num_samples;
  header.dtype = options_.wire_dtype;
  header.grad_norm = grad_norm;
  header.generation = options_.generation;
  absl::MutexLock lock(&context_mu_);
  header.checkpoint_clock = context_.checkpoint_clock;
  for (const auto& [from, at_once] : context_.at_once) {
    if (from <= clock) header.apply_at_once = at_once;
  }
  return header;
}

int64_t PsClient::AddPushCalls(const PushHeader& header,
                               const std::vector<std::vector<float>>& grads,
                               std::vector<Call>* calls, const std::vector<int>* params) {
  int64_t bytes = 0;
  std::vector<bool> wanted;
  if (params != nullptr) {
    wanted.assign(grads.size(), false);
    for (int p : *params) wanted[p] = true;
  }
  for (int s = 0; s < static_cast<int>(batches_.size()); ++s) {
    std::vector<std::vector<int32_t>> subset;
    if (params != nullptr) {
      std::vector<int32_t> chunks;
      for (int32_t id : partition_->ServerChunks(s)) {
        const int param = partition_->chunks()[id].param;
        if (Trains(param) && wanted[param - options_.first_param]) chunks.push_back(id);
      }
      subset = Pack(chunks);
    }
    for (const std::vector<int32_t>& batch : params != nullptr ? subset : batches_[s]) {
      std::vector<PushChunk> chunks;
      int64_t call_bytes = 0;
      for (int32_t id : batch) {
        const ChunkInfo& info = partition_->chunks()[id];
        chunks.push_back(
            {id, grads[info.param - options_.first_param].data() + info.offset, info.numel});
        call_bytes += info.numel * DTypeSize(header.dtype);
      }
      bytes += call_bytes;
      Call call;
      call.server = s;
      call.encode = [h = PushHeader(header), chunks = std::move(chunks)](
                        ShmLink* link) mutable {
        h.shm_segment = link == nullptr ? 0 : link->id();
        if (link != nullptr) WriteToShm(h.dtype, chunks, *link);
        return EncodePush(h, chunks);
      };
      call.finish = [this, call_bytes](const grpc::ByteBuffer&, const ShmLink* link) {
        if (link != nullptr) shm_bytes_ += call_bytes;
        return absl::OkStatus();
      };
      calls->push_back(std::move(call));
    }
  }
  return bytes;
}

absl::Status PsClient::Pull(int64_t clock, int64_t min_clock,
                            std::vector<std::vector<float>>* weights,
                            std::vector<int64_t>* applied) {
  PullState state;
  std::vector<Call> calls;
  AddPullCalls(clock, min_clock, weights, &state, &calls);
  RETURN_IF_ERROR(RunCalls(calls));
  FinishPull(state, applied);
  return absl::OkStatus();
}

absl::Status PsClient::Push(int64_t clock, int num_samples,
                            const std::vector<std::vector<float>>& grads, float grad_norm) {
  std::vector<Call> calls;
  const int64_t bytes = AddPushCalls(Header(clock, num_samples, grad_norm), grads, &calls);
  RETURN_IF_ERROR(RunCalls(calls));
  bytes_out_ += bytes;
  return absl::OkStatus();
}

absl::Status PsClient::PushParams(int64_t clock, int num_samples,
                                  const std::vector<std::vector<float>>& grads, float grad_norm,
                                  const std::vector<int>& params) {
  std::vector<Call> calls;
  const int64_t bytes =
      AddPushCalls(Header(clock, num_samples, grad_norm), grads, &calls, &params);
  RETURN_IF_ERROR(RunCalls(calls));
  bytes_out_ += bytes;
  return absl::OkStatus();
}

absl::Status PsClient::PushPull(int64_t clock, int num_samples,
                                const std::vector<std::vector<float>>& grads, float grad_norm,
                                int64_t pull_clock, int64_t min_clock,
                                std::vector<std::vector<float>>* weights,
                                std::vector<int64_t>* applied) {
  std::vector<Call> calls;
  const int64_t bytes = AddPushCalls(Header(clock, num_samples, grad_norm), grads, &calls);
  PullState state;
  AddPullCalls(pull_clock, min_clock, weights, &state, &calls);
  RETURN_IF_ERROR(RunCalls(calls));
  bytes_out_ += bytes;
  FinishPull(state, applied);
  return absl::OkStatus();
}

absl::Status PsClient::Seed(const std::vector<std::vector<float>>& weights) {
  PushHeader header = Header(/*clock=*/0, /*num_samples=*/1, /*grad_norm=*/0);
  header.seed = true;
  header.dtype = FP32;  // the initial weights exactly
  header.apply_at_once = false;
  std::vector<Call> calls;
  const int64_t bytes = AddPushCalls(header, weights, &calls);
  RETURN_IF_ERROR(RunCalls(calls));
  bytes_out_ += bytes;
  return absl::OkStatus();
}

void PsClient::SetPushContext(PushContext context) {
  absl::MutexLock lock(&context_mu_);
  context_ = std::move(context);
}

}  // namespace pstrain
