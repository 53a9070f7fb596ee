#include "worker/ps_client.h"

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/daemon_status.h"
#include "common/dtype.h"
#include "common/grad_codec.h"
#include "common/logging.h"
#include "common/retry.h"
#include "common/rpc.h"
#include "common/shm_link.h"
#include "common/status_macros.h"
#include "common/tensor_wire.h"
#include "proto/ps.grpc.pb.h"
#include "proto/ps.pb.h"

namespace pstrain {
namespace {

// The servers' addresses, in the order of their ids.
std::vector<std::string> AddressesOf(const ClusterMembers& cluster) {
  std::vector<std::string> out;
  for (const Member& s : cluster.servers()) out.push_back(s.address());
  return out;
}

}  // namespace

PsClient::PsClient(const ClusterMembers& cluster, const Partition* partition, int worker_id,
                   PsClientOptions options)
    : partition_(partition),
      worker_id_(worker_id),
      options_(options),
      links_(AddressesOf(cluster), *partition, worker_id, options.shm, options.standby_copies),
      addresses_(AddressesOf(cluster)),
      wire_(partition, options.first_param, options.wire_dtype, options.compression,
            options.feedback.get(), options.held_views.get(), options.generation) {
  const int channels = std::max(1, options_.channels_per_server);
  for (const Member& s : cluster.servers()) {
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
  }
}

PsClient::~PsClient() = default;

void PsClient::Prepare(Call& call) {
  ShmLink* link = links_.For(call.server, attempts_);
  // A pull through shared memory names its attempt (PullRequest.shm_sequence),
  // a compressed one the views held as it goes.
  if (call.encoded && call.link == link &&
      !(call.is_pull && (link != nullptr || wire_.PullsCompressed()))) {
    return;
  }
  call.request = call.encode(link);
  call.link = link;
  call.encoded = true;
}

void PsClient::Reroute(std::vector<Call>& calls, const std::vector<int>& todo) {
  if (!options_.routes) return;
  const ServerRoutes routes = options_.routes();
  if (routes.version() != routes_version_) {
    routes_version_ = routes.version();
    const int n = std::min(static_cast<int>(stubs_.size()), routes.addresses_size());
    for (int s = 0; s < n; ++s) {
      const std::string& address = routes.addresses(s);
      if (address.empty() || address == addresses_[s]) continue;  // gone, or where it was
      spdlog::info("server {} is at {} now", s, address);
      addresses_[s] = address;
      for (auto& stub : stubs_[s])
        stub = std::make_unique<grpc::GenericStub>(MakeBulkChannel(address));
      links_.Readdress(s, address);
      push_window_[s] = 0;
    }
    serving_.assign(routes.serving().begin(), routes.serving().end());
  }
  for (int i : todo) {
    Call& call = calls[i];
    const int to = call.home < static_cast<int>(serving_.size()) ? serving_[call.home] : call.home;
    if (to == call.server || to < 0 || to >= static_cast<int>(stubs_.size())) continue;
    call.server = to;
    call.encoded = false;  // for the new server's path
  }
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
  bool only_waiting = false;  // the last attempt's failures: calls that waited out their deadline
  bool progressed = false;    // the last attempt did or waited for some call
  RetryPolicy policy;
  policy.window = options_.retry_window;
  // Standby copies answer a push once its round is applied and held by
  // the standby, which may take an attempt or more: time spent so is not
  // time spent failing.
  policy.restart_window = [&] { return progressed; };
  policy.on_give_up = [&](const absl::Status& st, int attempts) {
    spdlog::error("gave up after {} attempts: {}", attempts, st.message());
  };
  // A call that waited out its attempt is still waiting (a pull for slower
  // workers, a push for its round and its standby): ask again at once,
  // without counting it against the retry window.
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
      Retry(policy, [&] { return Attempt(calls, &next_channel, &only_waiting, &progressed); });
  links_.ReleaseLost();  // no call holds them any more
  return FromDaemon(SERVER, st);
}

absl::Status PsClient::Attempt(std::vector<Call>& calls, int* next_channel, bool* only_waiting,
                               bool* progressed) {
  std::vector<int> todo;
  for (int i = 0; i < static_cast<int>(calls.size()); ++i) {
    if (!calls[i].done) todo.push_back(i);
  }
  ++attempts_;
  Reroute(calls, todo);
  for (int i : todo) Prepare(calls[i]);
  const bool bell = options_.shm_doorbell && std::all_of(todo.begin(), todo.end(), [&](int i) {
                      return calls[i].link != nullptr;
                    });
  FlightEnv env{&stubs_, &push_window_, &links_, &rpcs_, &shm_rings_, &next_seq_, options_.abandon};
  CallFlight flight(calls, std::move(env), bell);
  // With standby copies a push may wait at its server (for its round and
  // its standby) as a pull does; without, a push is answered at once.
  return Settle(calls, flight.Run(todo, next_channel), todo,
                /*pushes_wait=*/options_.standby_copies > 0, only_waiting, progressed);
}

absl::Status PsClient::Settle(std::vector<Call>& calls, const std::vector<absl::Status>& results,
                              const std::vector<int>& todo, bool pushes_wait,
                              bool* only_waiting, bool* progressed) {
  absl::Status retryable, waiting;
  *progressed = false;
  for (int i : todo) {
    const absl::Status& st = results[i];
    if (st.ok()) {
      calls[i].done = true;
      *progressed = true;
      continue;
    }
    const absl::Status named(st.code(),
                             absl::StrCat(calls[i].is_pull ? "pull from" : "push to", " server ",
                                          calls[i].server, ": ", st.message()));
    if (absl::IsDeadlineExceeded(st) && (calls[i].is_pull || pushes_wait)) {
      // Waited out its attempt at the server: a pull for its read
      // guarantee, a push (standby copies) for its round and its standby.
      *progressed = true;
      if (waiting.ok()) {
        waiting = absl::DeadlineExceededError(
            calls[i].is_pull
                ? absl::StrCat("pull from server ", calls[i].server,
                               " still waiting for its read guarantee")
                : absl::StrCat("push to server ", calls[i].server,
                               " still waiting for its round and its standby"));
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

const std::vector<std::vector<int32_t>>& PsClient::BatchesFor(
    int s, const std::vector<int>* params, std::vector<std::vector<int32_t>>* scoped) const {
  if (params == nullptr) return batches_[s];
  std::vector<bool> wanted;
  for (int p : *params) {
    if (p >= static_cast<int>(wanted.size())) wanted.resize(p + 1, false);
    wanted[p] = true;
  }
  std::vector<int32_t> chunks;
  for (int32_t id : partition_->ServerChunks(s)) {
    const int param = partition_->chunks()[id].param;
    const int mine = param - options_.first_param;
    if (Trains(param) && mine < static_cast<int>(wanted.size()) && wanted[mine]) {
      chunks.push_back(id);
    }
  }
  *scoped = Pack(chunks);
  return *scoped;
}

void PsClient::AddPullCalls(int64_t clock, int64_t min_clock,
                            std::vector<std::vector<float>>* weights,
                            const std::vector<int>* params, PullState* state,
                            std::vector<Call>* calls) {
  const DType dtype = options_.wire_dtype;
  if (state->landed) {
    state->in.assign(partition_->chunks().size(), false);
    state->missing.assign(weights->size(), 0);
  }
  for (int s = 0; s < static_cast<int>(batches_.size()); ++s) {
    std::vector<std::vector<int32_t>> scoped;
    for (const std::vector<int32_t>& packed : BatchesFor(s, params, &scoped)) {
      // The finishing call reads its batch: a scope's is kept in the state.
      const std::vector<int32_t>& batch =
          params == nullptr ? packed : state->batches.emplace_back(packed);
      PullRequest req;
      req.set_worker_id(worker_id_);
      req.set_clock(clock);
      req.set_min_clock(min_clock);
      req.set_dtype(dtype);
      req.set_generation(options_.generation);
      for (int32_t id : batch) req.add_chunks(id);
      if (state->landed) {
        for (int32_t id : batch)
          ++state->missing[partition_->chunks()[id].param - options_.first_param];
      }
      Call call;
      call.is_pull = true;
      call.home = s;
      call.server = s;
      call.encode = [this, req](ShmLink* link) mutable {
        req.set_shm_segment(link == nullptr ? 0 : link->id());
        req.set_shm_sequence(link == nullptr ? 0 : attempts_);
        wire_.NameHeldViews(&req);
        return SerializeSmall(req);
      };
      state->clocks.emplace_back();
      const size_t index = state->clocks.size() - 1;
      call.finish = [this, &batch, weights, state, index](
                        const grpc::ByteBuffer& reply, const ShmLink* link, int server) {
        return TakePullReply(server, batch, reply, link, weights, state, index);
      };
      calls->push_back(std::move(call));
    }
  }
}

absl::Status PsClient::TakePullReply(int s, const std::vector<int32_t>& batch,
                                     const grpc::ByteBuffer& reply, const ShmLink* link,
                                     std::vector<std::vector<float>>* weights, PullState* state,
                                     size_t index) {
  const std::string from = absl::StrCat("pull from server ", s, ": ");
  SliceReader reader(reply);
  std::vector<PayloadRef> refs;
  PulledViews views;
  RETURN_IF_ERROR(DecodePullResponse(reader, &refs, &state->clocks[index], &views));
  if (wire_.PullsCompressed() && !views.unknown.empty()) return OfferViews(s, batch, views.unknown);
  RETURN_IF_ERROR(Prefixed(from, wire_.CheckViews(batch, refs, views)));
  PulledPayloads payloads(&reader, link);
  for (size_t k = 0; k < refs.size(); ++k) {
    const ChunkInfo& info = partition_->chunks()[batch[k]];
    float* dst = (*weights)[info.param - options_.first_param].data() + info.offset;
    const absl::StatusOr<size_t> payload =
        wire_.TakePulled(refs[k], batch[k], views, k, payloads, dst);
    RETURN_IF_ERROR(Prefixed(from, payload.status()));
    state->bytes += static_cast<int64_t>(*payload);
    if (link != nullptr) shm_bytes_ += static_cast<int64_t>(*payload);
    if (state->landed && !state->in[batch[k]]) {
      state->in[batch[k]] = true;
      const int param = info.param - options_.first_param;
      if (--state->missing[param] == 0) state->landed(param);
    }
  }
  return absl::OkStatus();
}

absl::Status PsClient::OfferViews(int s, const std::vector<int32_t>& batch,
                                  const std::vector<uint64_t>& unknown) {
  OfferViewsRequest req;
  req.set_worker_id(worker_id_);
  req.set_generation(options_.generation);
  for (uint64_t chunk : unknown) {
    if (chunk > static_cast<uint64_t>(std::numeric_limits<int32_t>::max()) ||
        std::find(batch.begin(), batch.end(), static_cast<int32_t>(chunk)) == batch.end()) {
      return absl::DataLossError(absl::StrCat("pull from server ", s, ": the view of chunk ", chunk,
                                              ", not asked for, is unknown there"));
    }
    std::vector<float> weights;
    const uint64_t id = options_.held_views->Copy(static_cast<int32_t>(chunk), &weights);
    if (id == 0) continue;  // forgotten meanwhile: pulled whole
    HeldView* view = req.add_views();
    view->set_chunk(static_cast<int32_t>(chunk));
    view->set_id(id);
    view->mutable_weights()->Add(weights.begin(), weights.end());
  }
  std::unique_ptr<ParameterServer::Stub> stub =
      ParameterServer::NewStub(MakeBulkChannel(addresses_[s]));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  OfferViewsResponse resp;
  ++rpcs_;
  const grpc::Status st = stub->OfferViews(&ctx, req, &resp);
  if (!st.ok()) {
    // Whole values next time: the change is then not the one the other
    // server would have sent, but the pull goes on.
    for (uint64_t chunk : unknown) options_.held_views->Forget(static_cast<int32_t>(chunk));
    return absl::UnavailableError(absl::StrCat("pull from server ", s, ": it took none of ",
                                               req.views_size(), " views (", st.error_message(),
                                               "); pulling those chunks whole"));
  }
  return absl::UnavailableError(absl::StrCat("pull from server ", s, ": ", req.views_size(),
                                             " views it did not keep given to it; pulling again"));
}

void PsClient::FinishPull(const PullState& state, PulledClocks* clocks) {
  if (clocks != nullptr) {
    *clocks = PulledClocks();
    for (const PulledClocks& call : state.clocks) clocks->Merge(call);
  }
  bytes_in_ += state.bytes;
}

PushHeader PsClient::Header(int64_t clock, int num_samples, float grad_norm) {
  PushHeader header;
  header.worker_id = worker_id_;
  header.clock = clock;
  header.num_samples = num_samples;
  header.dtype = options_.wire_dtype;
  header.grad_norm = grad_norm;
  header.generation = options_.generation;
  if (options_.hyper) header.hyper = options_.hyper(clock);
  absl::MutexLock lock(&context_mu_);
  header.checkpoint_clock = context_.checkpoint_clock;
  for (const auto& [from, at_once] : context_.at_once) {
    if (from <= clock) header.apply_at_once = at_once;
  }
  return header;
}

int64_t PsClient::AddPushCalls(const PushHeader& header,
                               const std::vector<std::vector<float>>& grads,
                               std::vector<Call>* calls, const std::vector<int>* params,
                               const std::vector<bool>* absent,
                               const std::vector<const float*>* at) {
  int64_t bytes = 0;
  for (int s = 0; s < static_cast<int>(batches_.size()); ++s) {
    std::vector<std::vector<int32_t>> scoped;
    for (const std::vector<int32_t>& batch : BatchesFor(s, params, &scoped)) {
      PushHeader h = header;
      std::vector<int32_t> present;
      for (int32_t id : batch) {
        const size_t mine = partition_->chunks()[id].param - options_.first_param;
        const bool without = absent != nullptr && mine < absent->size() && (*absent)[mine];
        (without ? h.without_gradient : present).push_back(id);
      }
      std::vector<PushChunk> chunks;
      // Compressed once, here: a retry sends the same bytes.
      std::vector<std::vector<char>> compressed;
      const int64_t call_bytes = wire_.EncodePush(header, present, grads, at, &chunks, &compressed);
      bytes += call_bytes;
      Call call;
      call.home = s;
      call.server = s;
      if (wire_.Compressing(header)) {
        h.compression = wire_.compression().SerializeAsString();
      }
      call.encode = [h = std::move(h), chunks = std::move(chunks),
                     compressed = std::move(compressed)](ShmLink* link) mutable {
        for (size_t j = 0; j < chunks.size(); ++j) {
          if (compressed[j].empty()) continue;
          chunks[j].compressed = compressed[j].data();
          chunks[j].compressed_bytes = static_cast<int64_t>(compressed[j].size());
        }
        h.shm_segment = link == nullptr ? 0 : link->id();
        if (link != nullptr) ChunkWire::WriteToSlots(h.dtype, chunks, *link);
        return EncodePush(h, chunks);
      };
      call.finish = [this, call_bytes](const grpc::ByteBuffer&, const ShmLink* link, int) {
        if (link != nullptr) shm_bytes_ += call_bytes;
        return absl::OkStatus();
      };
      calls->push_back(std::move(call));
    }
  }
  return bytes;
}

absl::Status PsClient::Pull(int64_t clock, int64_t min_clock,
                            std::vector<std::vector<float>>* weights, PulledClocks* clocks,
                            const PullScope& scope) {
  PullState state;
  state.landed = scope.landed;
  std::vector<Call> calls;
  AddPullCalls(clock, min_clock, weights, scope.params, &state, &calls);
  RETURN_IF_ERROR(RunCalls(calls));
  FinishPull(state, clocks);
  return absl::OkStatus();
}

absl::Status PsClient::Push(int64_t clock, int num_samples,
                            const std::vector<std::vector<float>>& grads, float grad_norm,
                            const std::vector<bool>& absent,
                            const std::vector<const float*>& at) {
  std::vector<Call> calls;
  const int64_t bytes =
      AddPushCalls(Header(clock, num_samples, grad_norm), grads, &calls, nullptr, &absent, &at);
  RETURN_IF_ERROR(RunCalls(calls));
  bytes_out_ += bytes;
  return absl::OkStatus();
}

absl::Status PsClient::PushParams(int64_t clock, int num_samples,
                                  const std::vector<std::vector<float>>& grads, float grad_norm,
                                  const std::vector<int>& params,
                                  const std::vector<bool>& absent,
                                  const std::vector<const float*>& at) {
  std::vector<Call> calls;
  const int64_t bytes =
      AddPushCalls(Header(clock, num_samples, grad_norm), grads, &calls, &params, &absent, &at);
  RETURN_IF_ERROR(RunCalls(calls));
  bytes_out_ += bytes;
  return absl::OkStatus();
}

absl::Status PsClient::PushPull(int64_t clock, int num_samples,
                                const std::vector<std::vector<float>>& grads, float grad_norm,
                                int64_t pull_clock, int64_t min_clock,
                                std::vector<std::vector<float>>* weights,
                                PulledClocks* clocks) {
  std::vector<Call> calls;
  const int64_t bytes = AddPushCalls(Header(clock, num_samples, grad_norm), grads, &calls);
  PullState state;
  AddPullCalls(pull_clock, min_clock, weights, /*params=*/nullptr, &state, &calls);
  RETURN_IF_ERROR(RunCalls(calls));
  bytes_out_ += bytes;
  FinishPull(state, clocks);
  return absl::OkStatus();
}

absl::Status PsClient::PushInitialValues(const std::vector<std::vector<float>>& weights) {
  PushHeader header = Header(/*clock=*/0, /*num_samples=*/1, /*grad_norm=*/0);
  header.initial_values = true;
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
