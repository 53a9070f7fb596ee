#include "worker/row_client.h"

#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/daemon_status.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/placement.h"
#include "common/retry.h"
#include "common/row_wire.h"
#include "common/rows.h"
#include "common/rpc.h"
#include "common/status_macros.h"
#include "common/tensor_wire.h"
#include "proto/ps.pb.h"

namespace pstrain {

namespace {

constexpr char kNoAddresses[] = "the servers' addresses are not known yet";

constexpr char kPullRows[] = "/pstrain.ParameterServer/PullRows";
constexpr char kPushRows[] = "/pstrain.ParameterServer/PushRows";
// How often calls under way ask whether they were abandoned.
constexpr absl::Duration kAbandonPoll = absl::Milliseconds(100);

// A row the placement gives a server whose address is not known yet.
absl::Status UnknownServer(int server) {
  return FromDaemon(
      SERVER, absl::UnavailableError(
                  absl::StrCat("server ", server, " holds rows but its address is not known yet")));
}

}  // namespace

RowClient::RowClient(const JobSpec& job, std::function<std::vector<std::string>()> servers,
                     int worker_id, RowClientOptions options)
    : job_(job), worker_id_(worker_id), options_(options), servers_(std::move(servers)) {
  for (const TableSpec& t : job.tables()) widths_[t.name()] = t.width();
}

void RowClient::Resolve() {
  const std::vector<std::string> now = servers_();
  if (stubs_.size() < now.size()) {  // the job's servers, once known (more once one joins)
    stubs_.resize(now.size());
    addresses_.resize(now.size());
  }
  for (size_t s = 0; s < stubs_.size() && s < now.size(); ++s) {
    if (stubs_[s] != nullptr && now[s] == addresses_[s]) continue;
    addresses_[s] = now[s];
    stubs_[s] = std::make_unique<grpc::GenericStub>(MakeBulkChannel(now[s]));
  }
}

int RowClient::Servers() {
  Resolve();
  return static_cast<int>(stubs_.size());
}

absl::Status RowClient::Attempt(const char* method, const RowCall& call,
                                const std::vector<grpc::ByteBuffer>& requests,
                                std::vector<bool>* todo, std::vector<grpc::ByteBuffer>* replies,
                                bool* waited) {
  Resolve();
  grpc::CompletionQueue cq;
  const size_t n = requests.size();
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts(n);
  std::vector<std::unique_ptr<grpc::GenericClientAsyncResponseReader>> readers(n);
  std::vector<grpc::Status> statuses(n);
  int running = 0;
  for (size_t s = 0; s < n; ++s) {
    if (!(*todo)[s]) continue;
    if (stubs_[s] == nullptr) {
      statuses[s] = grpc::Status(grpc::StatusCode::UNAVAILABLE, "its address is not known yet");
      continue;
    }
    contexts[s] = ContextWithTimeout(options_.call_timeout);
    readers[s] = stubs_[s]->PrepareUnaryCall(contexts[s].get(), method, requests[s], &cq);
    readers[s]->StartCall();
    readers[s]->Finish(&(*replies)[s], &statuses[s], reinterpret_cast<void*>(s));
    ++running;
  }
  // The replies as they come; the caller may abandon the call meanwhile.
  absl::Status abandoned;
  while (running > 0) {
    void* tag = nullptr;
    bool ok = false;
    const auto next = cq.AsyncNext(&tag, &ok, absl::ToChronoTime(absl::Now() + kAbandonPoll));
    if (next == grpc::CompletionQueue::GOT_EVENT) {
      --running;
      continue;
    }
    if (next == grpc::CompletionQueue::SHUTDOWN) break;
    if (abandoned.ok() && call.abandon) {
      abandoned = call.abandon();
      if (!abandoned.ok()) {
        for (auto& ctx : contexts) {
          if (ctx != nullptr) ctx->TryCancel();
        }
      }
    }
  }
  if (!abandoned.ok()) return abandoned;
  // Done servers are not asked again; the attempt's status: the first
  // failure that may not be retried, else the first that may.
  absl::Status retryable, final;
  *waited = true;
  for (size_t s = 0; s < n; ++s) {
    if (!(*todo)[s]) continue;
    if (statuses[s].ok()) {
      (*todo)[s] = false;
      continue;
    }
    const absl::Status st(
        FromGrpc(statuses[s]).code(),
        absl::StrCat("server ", s, " (", addresses_[s], "): ", statuses[s].error_message()));
    *waited = *waited && absl::IsDeadlineExceeded(st);
    if (!IsRetryable(st)) {
      if (final.ok()) final = st;
    } else if (retryable.ok()) {
      retryable = st;
    }
  }
  return final.ok() ? retryable : final;
}

absl::Status RowClient::CallAll(const char* method, const RowCall& call, bool parks,
                                const std::vector<grpc::ByteBuffer>& requests,
                                std::vector<bool> todo, std::vector<grpc::ByteBuffer>* replies) {
  bool waited = false;
  RetryPolicy policy;
  policy.window = options_.retry_window;
  // A pull that waited out its deadline for its read guarantee still waits
  // for slower workers: it is asked again at once, outside the window.
  // Anything else that runs out its deadline counts against the window.
  policy.classify = [&waited, parks](const absl::Status& st) {
    if (parks && waited) return RetryAction::kRetryNow;
    return IsRetryable(st) ? RetryAction::kRetry : RetryAction::kStop;
  };
  policy.abandon = call.abandon;
  policy.on_retry = [this, &waited, parks](const absl::Status& st, int attempts) {
    ++retries_;
    if (!(parks && waited) && (attempts == 1 || attempts % 10 == 0)) {
      spdlog::warn("rows: retrying (attempt {}): {}", attempts + 1, st.message());
    }
  };
  return FromDaemon(SERVER, Retry(policy, [&] {
                      return Attempt(method, call, requests, &todo, replies, &waited);
                    }));
}

absl::StatusOr<int> RowClient::Width(const std::string& table) const {
  auto it = widths_.find(table);
  if (it == widths_.end()) {
    return absl::NotFoundError(absl::StrCat("the job declares no table '", table, "'"));
  }
  return it->second;
}

std::vector<std::string> HomeAddresses(const ServerRoutes& routes,
                                       std::vector<std::string> servers) {
  std::vector<std::string> out = servers;
  for (int home = 0; home < routes.serving_size() && home < static_cast<int>(out.size()); ++home) {
    const int at = routes.serving(home);
    if (at >= 0 && at < routes.addresses_size() && !routes.addresses(at).empty()) {
      out[home] = routes.addresses(at);
    } else if (at >= 0 && at < static_cast<int>(servers.size())) {
      out[home] = servers[at];
    }
  }
  return out;
}

absl::Status RowClient::Pull(const std::string& table, const RowCall& call,
                             absl::Span<const uint64_t> ids, std::vector<float>* rows) {
  absl::StatusOr<int> width = Width(table);
  if (!width.ok()) return width.status();
  const int servers = Servers();
  if (servers == 0) return FromDaemon(SERVER, absl::UnavailableError(kNoAddresses));
  // Each server's distinct ids and where its reply's rows go (the first
  // place each id has in `ids`); a repeated id is copied from its first.
  std::vector<PullRowsRequest> requests(servers);
  std::vector<std::vector<size_t>> places(servers);
  std::vector<size_t> first(ids.size());
  absl::flat_hash_map<uint64_t, size_t> seen;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto [it, fresh] = seen.try_emplace(ids[i], i);
    first[i] = it->second;
    if (!fresh) continue;
    const int s = OwnerOfRow(call.placement, job_.num_servers(), ids[i]);
    if (s >= servers) return UnknownServer(s);
    requests[s].add_ids(ids[i]);
    places[s].push_back(i);
  }
  const int64_t min_clock = TableMinClockForRead(job_, call.clock);
  std::vector<grpc::ByteBuffer> wire(servers), replies(servers);
  std::vector<bool> sent(servers);
  for (int s = 0; s < servers; ++s) {
    PullRowsRequest& req = requests[s];
    req.set_worker_id(worker_id_);
    req.set_table(table);
    req.set_dtype(FP32);
    req.set_min_clock(min_clock);
    req.set_generation(call.generation);
    req.set_home(s);
    wire[s] = SerializeSmall(req);
    sent[s] =
        TakesRows(call.placement, job_.num_servers(), s) && (req.ids_size() > 0 || min_clock > 0);
  }
  RETURN_IF_ERROR(CallAll(kPullRows, call, /*parks=*/min_clock > 0, wire, sent, &replies));
  rows->resize(ids.size() * static_cast<size_t>(*width));
  const size_t row_bytes = static_cast<size_t>(*width) * sizeof(float);
  for (int s = 0; s < servers; ++s) {
    if (!sent[s]) continue;
    PullRowsResponse head;
    const absl::Status read = ReadWithPayload(
        replies[s], &head, PullRowsResponse::kRowsFieldNumber,
        [&](size_t bytes, const ReadPayload& read_payload) -> absl::Status {
          if (bytes != places[s].size() * row_bytes) {
            return absl::DataLossError(absl::StrCat("server ", s, " sent ", bytes,
                                                    " bytes of rows, expected ",
                                                    places[s].size() * row_bytes));
          }
          for (size_t i : places[s]) {
            if (!read_payload(rows->data() + i * *width, row_bytes)) {
              return absl::DataLossError(absl::StrCat("server ", s, "'s rows are cut short"));
            }
          }
          return absl::OkStatus();
        });
    if (!read.ok()) return absl::DataLossError(read.message());
    rows_pulled_ += requests[s].ids_size();
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (first[i] == i) continue;
    std::memcpy(rows->data() + i * *width, rows->data() + first[i] * *width, row_bytes);
  }
  return absl::OkStatus();
}

absl::Status RowClient::Push(const std::string& table, const RowCall& call, int num_samples,
                             absl::Span<const uint64_t> ids, absl::Span<const float> grads) {
  absl::StatusOr<int> width = Width(table);
  if (!width.ok()) return width.status();
  if (grads.size() != ids.size() * static_cast<size_t>(*width)) {
    return absl::InvalidArgumentError(absl::StrCat("a push of ", ids.size(), " rows of width ",
                                                   *width, " needs ", ids.size() * *width,
                                                   " floats, got ", grads.size()));
  }
  std::vector<uint64_t> distinct;
  std::vector<float> summed;
  CoalesceRows(ids, grads, *width, &distinct, &summed);
  const int servers = Servers();
  if (servers == 0) return FromDaemon(SERVER, absl::UnavailableError(kNoAddresses));
  std::vector<PushRowsRequest> requests(servers);
  std::vector<std::unique_ptr<std::vector<float>>> payloads(servers);
  for (auto& p : payloads) p = std::make_unique<std::vector<float>>();
  for (size_t k = 0; k < distinct.size(); ++k) {
    const int s = OwnerOfRow(call.placement, job_.num_servers(), distinct[k]);
    if (s >= servers) return UnknownServer(s);
    requests[s].add_ids(distinct[k]);
    const float* row = summed.data() + k * *width;
    payloads[s]->insert(payloads[s]->end(), row, row + *width);
  }
  // Every server of the placement takes the push, those with none of its
  // rows too: a BSP round waits for it, and the table's update count
  // (SparseAdam's t) is the same on each.
  std::vector<grpc::ByteBuffer> wire(servers), replies(servers);
  std::vector<bool> takers(servers);
  for (int s = 0; s < servers; ++s) {
    takers[s] = TakesRows(call.placement, job_.num_servers(), s);
    PushRowsRequest& req = requests[s];
    req.set_worker_id(worker_id_);
    req.set_table(table);
    req.set_dtype(FP32);
    req.set_clock(call.clock);
    req.set_num_samples(num_samples);
    req.set_generation(call.generation);
    req.set_home(s);
    wire[s] = WithPayload(req, PushRowsRequest::kGradsFieldNumber, SliceOf(std::move(payloads[s])));
  }
  RETURN_IF_ERROR(CallAll(kPushRows, call, /*parks=*/false, wire, takers, &replies));
  for (const PushRowsRequest& req : requests) rows_pushed_ += req.ids_size();
  return absl::OkStatus();
}

}  // namespace pstrain
