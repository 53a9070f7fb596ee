#include "worker/row_client.h"

#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/rpc.h"
#include "common/status_macros.h"
#include "server/sparse_table.h"

namespace pstrain {

RowClient::RowClient(const JobSpec& job, const std::vector<std::string>& servers,
                     int worker_id, absl::Duration timeout)
    : job_(job), worker_id_(worker_id), timeout_(timeout) {
  for (const TableSpec& t : job.tables()) widths_[t.name()] = t.width();
  for (const std::string& address : servers) {
    stubs_.push_back(ParameterServer::NewStub(MakeBulkChannel(address)));
  }
}

template <typename Request, typename Reply>
absl::Status RowClient::CallAll(const std::vector<Request>& requests, std::vector<Reply>* replies,
                                AsyncCall<Request, Reply> call, bool empty_too) {
  grpc::CompletionQueue cq;
  const size_t n = requests.size();
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts(n);
  std::vector<std::unique_ptr<grpc::ClientAsyncResponseReader<Reply>>> readers(n);
  std::vector<grpc::Status> statuses(n);
  int running = 0;
  for (size_t s = 0; s < n; ++s) {
    if (requests[s].ids_size() == 0 && !empty_too) continue;
    contexts[s] = ContextWithTimeout(timeout_);
    readers[s] = (stubs_[s].get()->*call)(contexts[s].get(), requests[s], &cq);
    readers[s]->Finish(&(*replies)[s], &statuses[s], reinterpret_cast<void*>(s));
    ++running;
  }
  void* tag = nullptr;
  bool ok = false;
  for (; running > 0 && cq.Next(&tag, &ok); --running) {
  }
  for (size_t s = 0; s < n; ++s) {
    if (readers[s] == nullptr || statuses[s].ok()) continue;
    return absl::Status(FromGrpc(statuses[s]).code(),
                        absl::StrCat("server ", s, ": ", statuses[s].error_message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> RowClient::Width(const std::string& table) const {
  auto it = widths_.find(table);
  if (it == widths_.end()) {
    return absl::NotFoundError(absl::StrCat("the job declares no table '", table, "'"));
  }
  return it->second;
}

absl::Status RowClient::Pull(const std::string& table, int64_t clock,
                             absl::Span<const uint64_t> ids, std::vector<float>* rows) {
  absl::StatusOr<int> width = Width(table);
  if (!width.ok()) return width.status();
  const int servers = static_cast<int>(stubs_.size());
  // Each server's distinct ids, and where each of the caller's ids is found:
  // (server, row in that server's reply).
  std::vector<PullRowsRequest> requests(servers);
  std::vector<std::pair<int, int64_t>> where(ids.size());
  absl::flat_hash_map<uint64_t, std::pair<int, int64_t>> seen;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto [it, fresh] = seen.try_emplace(ids[i]);
    if (fresh) {
      const int s = ServerOfRow(ids[i], servers);
      it->second = {s, requests[s].ids_size()};
      requests[s].add_ids(ids[i]);
    }
    where[i] = it->second;
  }
  std::vector<PullRowsResponse> replies(servers);
  const int64_t min_clock = TableMinClockForRead(job_, clock);
  for (PullRowsRequest& req : requests) {
    req.set_worker_id(worker_id_);
    req.set_table(table);
    req.set_dtype(FP32);
    req.set_min_clock(min_clock);
  }
  RETURN_IF_ERROR(CallAll(requests, &replies, &ParameterServer::Stub::AsyncPullRows,
                          /*empty_too=*/min_clock > 0));
  for (int s = 0; s < servers; ++s) {
    if (requests[s].ids_size() == 0) continue;
    const size_t expected = static_cast<size_t>(requests[s].ids_size()) * *width * sizeof(float);
    if (replies[s].rows().size() != expected) {
      return absl::DataLossError(absl::StrCat("server ", s, " sent ", replies[s].rows().size(),
                                              " bytes of rows, expected ", expected));
    }
    rows_pulled_ += requests[s].ids_size();
  }
  rows->resize(ids.size() * static_cast<size_t>(*width));
  const size_t row_bytes = static_cast<size_t>(*width) * sizeof(float);
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto [s, r] = where[i];
    std::memcpy(rows->data() + i * *width, replies[s].rows().data() + r * row_bytes, row_bytes);
  }
  return absl::OkStatus();
}

absl::Status RowClient::Push(const std::string& table, int64_t clock, int num_samples,
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
  const int servers = static_cast<int>(stubs_.size());
  std::vector<PushRowsRequest> requests(servers);
  const size_t row_bytes = static_cast<size_t>(*width) * sizeof(float);
  for (size_t k = 0; k < distinct.size(); ++k) {
    PushRowsRequest& req = requests[ServerOfRow(distinct[k], servers)];
    req.add_ids(distinct[k]);
    req.mutable_grads()->append(reinterpret_cast<const char*>(summed.data() + k * *width),
                                row_bytes);
  }
  for (PushRowsRequest& req : requests) {
    req.set_worker_id(worker_id_);
    req.set_table(table);
    req.set_dtype(FP32);
    req.set_clock(clock);
    req.set_num_samples(num_samples);
  }
  // Every server takes the push, those with none of its rows too: a BSP
  // round waits for it, and the table's update count (SparseAdam's t) is
  // the same on each.
  std::vector<PushRowsResponse> replies(servers);
  RETURN_IF_ERROR(CallAll(requests, &replies, &ParameterServer::Stub::AsyncPushRows,
                          /*empty_too=*/true));
  for (const PushRowsRequest& req : requests) rows_pushed_ += req.ids_size();
  return absl::OkStatus();
}

}  // namespace pstrain
