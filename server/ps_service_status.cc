// PsService's Status: the server's counters, its store's and tables'
// state, its standby copies, and what its parked calls wait for. See
// server/ps_service.h.
#include "absl/strings/str_cat.h"
#include "common/process_stats.h"
#include "common/refused.h"
#include "server/ps_service.h"

namespace pstrain {
namespace {

// What a parked pull of chunks waits for, for Status.
std::string ParkedWhat(const ChunkRequests* chunks, const ByteBudget& replies, const PsCall& call) {
  const PullRequest& pull = call.pull;
  const std::string what = absl::StrCat("pull by worker ", pull.worker_id(), " of ",
                                        pull.chunks_size(), " chunks for clock ", pull.clock());
  const ChunkStore* s = chunks == nullptr ? nullptr : &chunks->store();
  if (chunks != nullptr && chunks->Readable(pull)) {
    return absl::StrCat(what, ", waiting for room to reply (", replies.in_use(), " of ",
                        replies.limit(), " bytes of replies in flight)");
  }
  std::string lagging;
  for (int32_t chunk : pull.chunks()) {
    lagging = s == nullptr ? "" : s->Lagging(chunk, pull.min_clock());
    if (!lagging.empty()) break;
  }
  return absl::StrCat(what, ", waiting for every worker's updates before clock ", pull.min_clock(),
                      lagging.empty() ? "" : ": behind: ", lagging);
}

// An offloaded store's memory and file traffic.
OffloadStatus OffloadOf(const ChunkMemoryStats& m) {
  OffloadStatus st;
  st.set_resident_bytes(m.resident_bytes);
  st.set_disk_bytes(m.disk_bytes);
  st.set_direct(m.direct);
  st.set_read_bytes(m.read_bytes);
  st.set_write_bytes(m.write_bytes);
  st.set_read_mb_per_s(m.read_s > 0 ? m.read_bytes / m.read_s / 1e6 : 0);
  st.set_write_mb_per_s(m.write_s > 0 ? m.write_bytes / m.write_s / 1e6 : 0);
  return st;
}

}  // namespace

// ---- Status ---------------------------------------------------------------

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

MemberStatus PsService::GetStatus() const {
  MemberStatus st;
  std::shared_ptr<Shard> shard;
  std::shared_ptr<ChunkRequests> chunks;
  std::shared_ptr<RowRequests> rows;
  {
    absl::MutexLock lock(&mu_);
    st.set_id(id_);
    st.set_address(address_);
    st.set_state(state_);
    st.set_message(message_);
    // (Version 1, the initial placement, until a move placed the shard anew.)
    if (shard_ != nullptr)
      st.mutable_server()->set_placement_version(std::max<int64_t>(1, placement_version_));
    shard = shard_;
    chunks = chunks_;
    rows = rows_;
  }
  const ChunkStore* s = chunks == nullptr ? nullptr : &chunks->store();
  const SparseTables* tables = rows == nullptr ? nullptr : &rows->tables();
  st.set_role(SERVER);
  st.set_uptime_s(absl::ToDoubleSeconds(absl::Now() - start_));
  st.set_clock(s == nullptr ? 0 : s->MinAppliedClock());
  st.set_bytes_in(counters_.bytes_in);
  st.set_bytes_out(counters_.bytes_out);
  st.set_pushes(counters_.pushes);
  st.set_pulls(counters_.pulls);
  st.set_shm_bytes(counters_.shm_bytes);
  st.set_shm_rings(counters_.shm_rings);
  st.set_shm_segments(shm_ == nullptr ? 0 : shm_->attached());
  st.set_rss_bytes(ResidentBytes());
  ServerStatus* server = st.mutable_server();
  auto& refused_by_what = *server->mutable_refused();
  refused_by_what[kRefusedChunks] = refused();
  refused_by_what[kRefusedRows] = tables == nullptr ? 0 : tables->refused();
  refused_by_what[kRefusedShm] = shm_ == nullptr ? 0 : shm_->refused();
  if (tables != nullptr) {
    for (TableStatus& t : tables->Status()) *server->add_tables() = std::move(t);
  }
  if (s != nullptr && s->NumParams() > 0) {
    server->set_params(s->NumParams());
    server->set_bytes_per_param(static_cast<double>(s->BytesHeld()) / s->NumParams());
  }
  if (shard != nullptr) {
    st.set_generation(shard->generation());
    server->set_nonfinite_skipped(shard->NonfiniteSkipped());
    server->set_checkpoint_clock(shard->CheckpointClock());
    const ChunkMemoryStats memory = shard->store()->memory_stats();
    if (memory.offloaded) *server->mutable_offload() = OffloadOf(memory);
  }
  if (shard != nullptr && shard->store()->standby_copies() > 0) {
    StandbyStatus* copies = server->mutable_standby();
    {
      // The routes first: the copies' state below is at least theirs.
      absl::MutexLock lock(&mu_);
      copies->set_routes_version(routes_.version());
    }
    const StandbyParts& standby = shard->standby();
    for (int home : standby.Homes(/*served=*/true)) copies->add_serving(home);
    for (int home : standby.Homes(/*served=*/false)) copies->add_standby_of(home);
    copies->set_ready(standby.Filled());
    copies->set_replication_lag(standby.Lag());
    copies->set_replicated_bytes(counters_.replicated_bytes);
  }
  AddWaits(chunks.get(), &st);
  return st;
}

void PsService::AddWaits(const ChunkRequests* chunks, MemberStatus* st) const {
  parked_rows_.ForEachWaiting([st](const PsCall& call) {
    for (TableStatus& t : *st->mutable_server()->mutable_tables()) {
      if (t.name() == call.rows.table()) t.set_pulls_waiting(t.pulls_waiting() + 1);
    }
    Wait* w = st->add_waits();
    w->set_what(absl::StrCat("pull by worker ", call.rows.worker_id(), " of ", call.rows.ids_size(),
                             " rows of table '", call.rows.table(),
                             "', waiting for every worker's pushes before clock ",
                             call.rows.min_clock()));
    w->set_since_unix_ms(absl::ToUnixMillis(call.parked_at));
  });
  early_pushes_.ForEachWaiting([st](const PsCall& call) {
    Wait* w = st->add_waits();
    w->set_what(absl::StrCat("push by worker ", call.early.worker, " of ", call.early.chunks.size(),
                             " chunks for clock ", call.early.clock,
                             ", waiting for the round of clock ", call.early.clock - 1,
                             " to be applied"));
    w->set_since_unix_ms(absl::ToUnixMillis(call.parked_at));
  });
  parked_chunks_.ForEachWaiting([&](const PsCall& call) {
    Wait* w = st->add_waits();
    w->set_what(ParkedWhat(chunks, replies_, call));
    w->set_since_unix_ms(absl::ToUnixMillis(call.parked_at));
  });
}

}  // namespace pstrain
