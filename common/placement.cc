#include "common/placement.h"

#include <algorithm>
#include <cstdlib>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

// What a plan works on: each listed server's bytes and buckets.
struct Loads {
  std::map<int, int64_t> bytes;
  std::map<int, int> buckets;
};

Loads LoadsOf(const Placement& p, const Partition& partition, int64_t bytes_per_param) {
  Loads loads;
  for (int s : p.servers()) {
    loads.bytes[s] = 0;
    loads.buckets[s] = 0;
  }
  for (int32_t c = 0; c < p.chunk_server_size(); ++c) {
    loads.bytes[p.chunk_server(c)] += partition.chunks()[c].numel * bytes_per_param;
  }
  for (int s : p.bucket_server()) ++loads.buckets[s];
  return loads;
}

// The listed server holding the most (`most`) or the fewest of `load`,
// ties to the lowest id; `skip` is never taken.
template <typename T>
int Extreme(const std::map<int, T>& load, bool most, int skip) {
  int best = -1;
  for (const auto& [s, v] : load) {
    if (s == skip) continue;
    if (best < 0 || (most ? v > load.at(best) : v < load.at(best))) best = s;
  }
  return best;
}

absl::Status CheckBudgets(const Loads& loads, const PlacementLimits& limits) {
  for (const auto& [s, budget] : limits.budget) {
    auto it = loads.bytes.find(s);
    if (it == loads.bytes.end() || budget <= 0 || it->second <= budget) continue;
    return absl::FailedPreconditionError(
        absl::StrCat("server ", s, " would hold ", it->second,
                     " bytes of chunks, over its memory budget of ", budget));
  }
  return absl::OkStatus();
}

void Move(PlacementMove::Kind kind, int32_t id, int to, int64_t bytes, Placement* p,
          std::vector<PlacementMove>* moves) {
  auto* owners =
      kind == PlacementMove::Kind::kChunk ? p->mutable_chunk_server() : p->mutable_bucket_server();
  moves->push_back({kind, id, owners->Get(id), to, bytes});
  owners->Set(id, to);
}

// The chunk of `from` to move to `to` with the loads `bytes`: of those
// whose move leaves the pair better balanced (smaller than their
// difference), the one closest to half of it; -1 when none.
int32_t ChunkToMove(const Placement& p, const Partition& partition, int64_t bytes_per_param,
                    const std::map<int, int64_t>& bytes, int from, int to) {
  const int64_t gap = bytes.at(from) - bytes.at(to);
  int32_t best = -1;
  int64_t best_miss = 0;
  for (int32_t c = 0; c < p.chunk_server_size(); ++c) {
    if (p.chunk_server(c) != from) continue;
    const int64_t b = partition.chunks()[c].numel * bytes_per_param;
    if (b >= gap) continue;
    const int64_t miss = std::llabs(2 * b - gap);
    if (best < 0 || miss < best_miss) {
      best = c;
      best_miss = miss;
    }
  }
  return best;
}

// A change from `now` to a placement of the next version over `servers`
// (its chunks and buckets where `now` has them, until moved).
PlacementChange ChangeOf(const Placement& now, const std::vector<int>& servers) {
  PlacementChange change;
  change.after = now;
  change.after.set_version(now.version() + 1);
  change.after.clear_servers();
  for (int s : servers) change.after.add_servers(s);
  return change;
}

void SortMoves(std::vector<PlacementMove>* moves) {
  std::stable_sort(moves->begin(), moves->end(),
                   [](const PlacementMove& a, const PlacementMove& b) {
                     if (a.kind != b.kind) return a.kind == PlacementMove::Kind::kChunk;
                     if (a.bytes != b.bytes) return a.bytes > b.bytes;
                     return a.id < b.id;
                   });
}

}  // namespace

Placement InitialPlacement(const Partition& partition) {
  Placement p;
  p.set_version(1);
  for (int s = 0; s < partition.num_servers(); ++s) p.add_servers(s);
  for (const ChunkInfo& c : partition.chunks()) p.add_chunk_server(c.server);
  for (int b = 0; b < kRowBuckets; ++b) p.add_bucket_server(b % partition.num_servers());
  return p;
}

absl::Status CheckPlacement(const Placement& placement, int num_chunks) {
  if (placement.servers().empty()) return absl::InvalidArgumentError("placement: no servers");
  const std::set<int> servers(placement.servers().begin(), placement.servers().end());
  for (int i = 0; i < placement.servers_size(); ++i) {
    if (placement.servers(i) < 0 || (i > 0 && placement.servers(i) <= placement.servers(i - 1))) {
      return absl::InvalidArgumentError("placement: servers must be ascending and not negative");
    }
  }
  if (placement.chunk_server_size() != num_chunks) {
    return absl::InvalidArgumentError(absl::StrCat("placement: ", placement.chunk_server_size(),
                                                   " chunks; the job has ", num_chunks));
  }
  if (placement.bucket_server_size() != kRowBuckets) {
    return absl::InvalidArgumentError(absl::StrCat("placement: ", placement.bucket_server_size(),
                                                   " row buckets, not ", kRowBuckets));
  }
  for (int i = 0; i < placement.chunk_server_size(); ++i) {
    if (!servers.count(placement.chunk_server(i))) {
      return absl::InvalidArgumentError(absl::StrCat("placement: chunk ", i, " on server ",
                                                     placement.chunk_server(i), ", not listed"));
    }
  }
  for (int i = 0; i < placement.bucket_server_size(); ++i) {
    if (!servers.count(placement.bucket_server(i))) {
      return absl::InvalidArgumentError(absl::StrCat("placement: row bucket ", i, " on server ",
                                                     placement.bucket_server(i), ", not listed"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Partition> PlacedPartition(const std::vector<ParamInfo>& params, int64_t chunk_bytes,
                                          int num_servers, const Placement& placement) {
  if (placement.version() <= 1) return Partition::Make(params, chunk_bytes, num_servers);
  ASSIGN_OR_RETURN(Partition cut, Partition::Make(params, chunk_bytes, 1));
  RETURN_IF_ERROR(CheckPlacement(placement, static_cast<int>(cut.chunks().size())));
  return cut.Reassigned({placement.chunk_server().begin(), placement.chunk_server().end()},
                        placement.servers(placement.servers_size() - 1) + 1);
}

int ServerOfChunk(const Placement& placement, int32_t chunk) {
  return placement.chunk_server(chunk);
}

int ServerOfRow(const Placement& placement, uint64_t id) {
  return placement.bucket_server(RowBucket(id));
}

int OwnerOfRow(const Placement& placement, int servers, uint64_t id) {
  return placement.version() > 1 ? ServerOfRow(placement, id) : ServerOfRow(id, servers);
}

bool TakesRows(const Placement& placement, int servers, int server) {
  if (placement.version() <= 1) return server >= 0 && server < servers;
  const auto& placed = placement.servers();
  return std::find(placed.begin(), placed.end(), server) != placed.end();
}

std::vector<int32_t> ChunksOn(const Placement& placement, int server) {
  std::vector<int32_t> ids;
  for (int32_t c = 0; c < placement.chunk_server_size(); ++c) {
    if (placement.chunk_server(c) == server) ids.push_back(c);
  }
  return ids;
}

std::vector<int32_t> ChunksLeaving(const Placement& from, const Placement& to, int server) {
  std::vector<int32_t> ids;
  for (int32_t c : ChunksOn(from, server)) {
    if (c >= to.chunk_server_size() || to.chunk_server(c) != server) ids.push_back(c);
  }
  return ids;
}

int FreeServerId(const Placement& placement) {
  int id = 0;
  for (int s : placement.servers()) {  // ascending
    if (s != id) break;
    ++id;
  }
  return id;
}

Handover HandoverTo(const Placement& from, const Placement& to, int server) {
  Handover out;
  for (int32_t c = 0; c < to.chunk_server_size() && c < from.chunk_server_size(); ++c) {
    const int holder = from.chunk_server(c);
    if (to.chunk_server(c) == server && holder != server) out.chunks[holder].push_back(c);
  }
  for (int b = 0; b < to.bucket_server_size() && b < from.bucket_server_size(); ++b) {
    const int holder = from.bucket_server(b);
    if (to.bucket_server(b) == server && holder != server) out.rows.insert(holder);
  }
  return out;
}

std::vector<int> Takers(const Placement& from, const Placement& to) {
  std::vector<int> out;
  for (int s : to.servers()) {
    if (!HandoverTo(from, to, s).empty()) out.push_back(s);
  }
  return out;
}

int64_t PlacementChange::MovedBytes() const {
  int64_t bytes = 0;
  for (const PlacementMove& m : moves) bytes += m.bytes;
  return bytes;
}

absl::StatusOr<PlacementChange> PlanAdd(const Placement& now, const Partition& partition,
                                        int server, const PlacementLimits& limits) {
  RETURN_IF_ERROR(CheckPlacement(now, static_cast<int>(partition.chunks().size())));
  const std::vector<int> listed(now.servers().begin(), now.servers().end());
  if (server < 0 || std::count(listed.begin(), listed.end(), server) > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("server ", server, " cannot be added: the job has it already"));
  }
  std::vector<int> servers = listed;
  servers.insert(std::upper_bound(servers.begin(), servers.end(), server), server);
  PlacementChange change = ChangeOf(now, servers);
  Loads loads = LoadsOf(now, partition, limits.bytes_per_param);
  loads.bytes[server] = 0;
  loads.buckets[server] = 0;
  int64_t total = 0;
  for (const auto& [s, b] : loads.bytes) total += b;
  const int64_t share = total / static_cast<int64_t>(servers.size());
  // Each move strictly shrinks its pair's gap, so this ends; a move at most a chunk.
  while (loads.bytes[server] < share) {
    int from = -1;
    int32_t chunk = -1;
    std::map<int, int64_t> rest = loads.bytes;  // the donors, most bytes first
    while (chunk < 0 && (from = Extreme(rest, /*most=*/true, server)) >= 0) {
      chunk =
          ChunkToMove(change.after, partition, limits.bytes_per_param, loads.bytes, from, server);
      rest.erase(from);
    }
    if (chunk < 0) break;
    const int64_t b = partition.chunks()[chunk].numel * limits.bytes_per_param;
    Move(PlacementMove::Kind::kChunk, chunk, server, b, &change.after, &change.moves);
    loads.bytes[from] -= b;
    loads.bytes[server] += b;
  }
  const int bucket_share = kRowBuckets / static_cast<int>(servers.size());
  while (loads.buckets[server] < bucket_share) {
    const int from = Extreme(loads.buckets, /*most=*/true, server);
    int32_t bucket = kRowBuckets - 1;  // the donor's highest bucket
    while (change.after.bucket_server(bucket) != from) --bucket;
    Move(PlacementMove::Kind::kBucket, bucket, server, 0, &change.after, &change.moves);
    --loads.buckets[from];
    ++loads.buckets[server];
  }
  RETURN_IF_ERROR(CheckBudgets(loads, limits));
  SortMoves(&change.moves);
  return change;
}

absl::StatusOr<PlacementChange> PlanDrain(const Placement& now, const Partition& partition,
                                          int server, const PlacementLimits& limits) {
  RETURN_IF_ERROR(CheckPlacement(now, static_cast<int>(partition.chunks().size())));
  const std::vector<int> listed(now.servers().begin(), now.servers().end());
  if (std::count(listed.begin(), listed.end(), server) == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("server ", server, " cannot be drained: the job does not have it"));
  }
  if (listed.size() == 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("server ", server, " cannot be drained: it is the job's last server"));
  }
  std::vector<int> servers = listed;
  servers.erase(std::find(servers.begin(), servers.end(), server));
  PlacementChange change = ChangeOf(now, servers);
  Loads loads = LoadsOf(now, partition, limits.bytes_per_param);
  std::vector<int32_t> chunks = ChunksOn(now, server);
  std::stable_sort(chunks.begin(), chunks.end(), [&](int32_t a, int32_t b) {
    return partition.chunks()[a].numel > partition.chunks()[b].numel;
  });
  for (int32_t c : chunks) {
    const int to = Extreme(loads.bytes, /*most=*/false, server);
    const int64_t b = partition.chunks()[c].numel * limits.bytes_per_param;
    Move(PlacementMove::Kind::kChunk, c, to, b, &change.after, &change.moves);
    loads.bytes[to] += b;
  }
  for (int32_t bucket = 0; bucket < kRowBuckets; ++bucket) {
    if (now.bucket_server(bucket) != server) continue;
    const int to = Extreme(loads.buckets, /*most=*/false, server);
    Move(PlacementMove::Kind::kBucket, bucket, to, 0, &change.after, &change.moves);
    ++loads.buckets[to];
  }
  loads.bytes.erase(server);
  loads.buckets.erase(server);
  RETURN_IF_ERROR(CheckBudgets(loads, limits));
  SortMoves(&change.moves);
  return change;
}

}  // namespace pstrain
