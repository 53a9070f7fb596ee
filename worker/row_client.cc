#include "worker/row_client.h"

#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/rpc.h"
#include "server/sparse_table.h"

namespace pstrain {

RowClient::RowClient(const JobSpec& job, const std::vector<std::string>& servers,
                     int worker_id, absl::Duration timeout)
    : worker_id_(worker_id), timeout_(timeout) {
  for (const TableSpec& t : job.tables()) widths_[t.name()] = t.width();
  for (const std::string& address : servers) {
    stubs_.push_back(ParameterServer::NewStub(MakeBulkChannel(address)));
  }
}

absl::StatusOr<int> RowClient::Width(const std::string& table) const {
  auto it = widths_.find(table);
  if (it == widths_.end()) {
    return absl::NotFoundError(absl::StrCat("the job declares no table '", table, "'"));
  }
  return it->second;
}

absl::Status RowClient::Pull(const std::string& table, absl::Span<const uint64_t> ids,
                             std::vector<float>* rows) {
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
  for (int s = 0; s < servers; ++s) {
    if (requests[s].ids_size() == 0) continue;
    requests[s].set_worker_id(worker_id_);
    requests[s].set_table(table);
    requests[s].set_dtype(FP32);
    const grpc::Status st =
        stubs_[s]->PullRows(ContextWithTimeout(timeout_).get(), requests[s], &replies[s]);
    if (!st.ok()) {
      return absl::Status(FromGrpc(st).code(), absl::StrCat("server ", s, ": ", st.error_message()));
    }
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

absl::Status RowClient::Push(const std::string& table, int64_t clock,
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
  for (int s = 0; s < servers; ++s) {
    if (requests[s].ids_size() == 0) continue;
    requests[s].set_worker_id(worker_id_);
    requests[s].set_table(table);
    requests[s].set_dtype(FP32);
    requests[s].set_clock(clock);
    PushRowsResponse reply;
    const grpc::Status st =
        stubs_[s]->PushRows(ContextWithTimeout(timeout_).get(), requests[s], &reply);
    if (!st.ok()) {
      return absl::Status(FromGrpc(st).code(), absl::StrCat("server ", s, ": ", st.error_message()));
    }
    rows_pushed_ += requests[s].ids_size();
  }
  return absl::OkStatus();
}

}  // namespace pstrain
