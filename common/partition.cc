#include "common/partition.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace pstrain {

absl::StatusOr<Partition> Partition::Make(const std::vector<ParamInfo>& params, int64_t chunk_bytes,
                                          int num_servers) {
  if (num_servers < 1) return absl::InvalidArgumentError("partition: no servers");
  if (chunk_bytes < static_cast<int64_t>(sizeof(float))) {
    return absl::InvalidArgumentError(absl::StrCat("partition: chunk_bytes ", chunk_bytes));
  }
  const int64_t max_numel = chunk_bytes / static_cast<int64_t>(sizeof(float));
  Partition p;
  p.by_param_.resize(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    // A 2-D parameter is cut at row boundaries when a row fits in a chunk,
    // so that a chunk is a matrix (Adafactor factors per chunk).
    int64_t step = max_numel;
    if (params[i].shape.size() == 2 && params[i].shape[1] <= max_numel) {
      step = max_numel / params[i].shape[1] * params[i].shape[1];
    }
    for (int64_t off = 0; off < params[i].numel; off += step) {
      if (p.chunks_.size() >= static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
        return absl::InvalidArgumentError("partition: too many chunks");
      }
      ChunkInfo c;
      c.id = static_cast<int32_t>(p.chunks_.size());
      c.param = static_cast<int32_t>(i);
      c.offset = off;
      c.numel = std::min(step, params[i].numel - off);
      p.by_param_[i].push_back(c.id);
      p.chunks_.push_back(c);
    }
  }
  std::vector<int32_t> order(p.chunks_.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return p.chunks_[a].numel > p.chunks_[b].numel; });
  std::vector<int64_t> load(num_servers, 0);
  p.by_server_.resize(num_servers);
  for (int32_t id : order) {
    const int server = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    p.chunks_[id].server = server;
    load[server] += p.chunks_[id].numel;
    p.by_server_[server].push_back(id);
  }
  for (auto& ids : p.by_server_) std::sort(ids.begin(), ids.end());
  return p;
}

Partition Partition::Reassigned(const std::vector<int32_t>& servers, int num_servers) const {
  Partition p = *this;
  p.by_server_.assign(num_servers, {});
  for (ChunkInfo& c : p.chunks_) {
    c.server = servers[c.id];
    p.by_server_[c.server].push_back(c.id);  // ascending: ids in order
  }
  return p;
}

int64_t Partition::ServerBytes(int server) const {
  int64_t bytes = 0;
  for (int32_t id : by_server_[server]) bytes += chunks_[id].numel * sizeof(float);
  return bytes;
}

std::vector<int> HeldHomes(int server, int num_servers, int standby_copies) {
  std::vector<int> homes = {server};
  if (standby_copies > 0 && num_servers > 1)
    homes.push_back((server + num_servers - 1) % num_servers);
  return homes;
}

std::vector<int32_t> HeldChunks(const Partition& partition, int server, int standby_copies) {
  std::vector<int32_t> out;
  for (int home : HeldHomes(server, partition.num_servers(), standby_copies)) {
    const std::vector<int32_t>& ids = partition.ServerChunks(home);
    out.insert(out.end(), ids.begin(), ids.end());
  }
  return out;
}

}  // namespace pstrain
