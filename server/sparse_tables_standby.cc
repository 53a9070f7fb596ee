// SparseTables' standby (JobSpec.standby_copies), as ChunkStore's
// (server/chunk_store_standby.cc): each served part's changes shipped to
// its standby in order (Ship), the standby's confirmations, and a copy
// replaying its primary's changes (Mirror); the roles and what every part
// does alike are server/standby_parts.h's. A change is what the rows' optimizer took
// -- the ids and their gradients -- and the copy takes it through the very
// SparseTable code the primary ran, so admission, spilling and the update
// count follow by themselves and the rows stay bit for bit the primary's.
// Pulls are not shipped: a row's start is a function of its id, so the
// copy makes the rows an update names that it lacks (MakeMissing), and
// so does a promoted part for the rows the workers pulled from the server
// it took over from. (Expiry would need every pull's touch: it is refused
// with standby copies, common/job_validate.cc.)
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/sparse_tables.h"

namespace pstrain {
namespace {

std::string FloatBytes(const float* values, size_t n) {
  return std::string(reinterpret_cast<const char*>(values), n * sizeof(float));
}

// `bytes` as floats (a copy: a protobuf string need not be aligned).
std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

}  // namespace

void SparseTables::Ship(Table& table, bool step, absl::Span<const uint64_t> ids,
                        absl::Span<const float> grads, bool failed) {
  TableSink* sink = sink_.load();
  switch (table.standby.Changed(sink != nullptr, failed, table.clocks.applied())) {
    case StandbyState::Ship::kNothing:
      return;
    case StandbyState::Ship::kWhole:  // not an update the standby could replay
      sink->NeedWholeTable(table.home, table.rows.config().name);
      return;
    case StandbyState::Ship::kChange:
      break;
  }
  TableUpdate u;
  u.set_table(table.rows.config().name);
  u.set_version(table.standby.version);
  u.set_step(step);
  if (step) {
    u.mutable_ids()->Add(ids.begin(), ids.end());
    u.set_values(FloatBytes(grads.data(), grads.size()));
  }
  for (int64_t a : table.clocks.applied()) u.add_applied(a);
  sink->ChangedTable(table.home, std::move(u));
}

absl::Status SparseTables::MakeMissing(Table& table, absl::Span<const uint64_t> ids) {
  std::vector<float> scratch(static_cast<size_t>(table.width));
  for (uint64_t id : ids) {
    if (table.rows.Has(id)) continue;
    // With admission a pull makes nothing: the update admits (or drops).
    RETURN_IF_ERROR(table.rows.Pull(absl::MakeConstSpan(&id, 1), scratch.data()));
  }
  return absl::OkStatus();
}

bool SparseTables::Served(int home, absl::string_view name) const {
  const Table* table = Part(name, home);
  if (table == nullptr) return false;
  absl::MutexLock lock(&table->mu);
  return table->standby.serving;
}

bool SparseTables::Replicated(int home, absl::string_view name, int worker, int64_t clock) const {
  if (standby_copies_ == 0) return true;
  const Table* table = Part(name, home);
  if (table == nullptr) return true;
  absl::MutexLock lock(&table->mu);
  return table->standby.Holds(worker, clock);
}

void SparseTables::Confirmed(int home, const std::string& name, int64_t version,
                             const std::vector<int64_t>& applied) {
  Table* table = Part(name, home);
  if (table == nullptr) return;
  absl::MutexLock lock(&table->mu);
  table->standby.Confirm(version, applied);
}

absl::StatusOr<TableUpdate> SparseTables::FullUpdate(int home, const std::string& name) {
  Table* table = Part(name, home);
  if (table == nullptr) return absl::NotFoundError(absl::StrCat("no part of table ", name));
  absl::MutexLock lock(&table->mu);
  if (!table->standby.serving) return absl::FailedPreconditionError("not served here");
  return WholeState(*table, nullptr);
}

absl::StatusOr<TableUpdate> SparseTables::WholeState(Table& table,
                                                     const std::function<bool(uint64_t)>& keep) {
  TableUpdate u;
  u.set_table(table.rows.config().name);
  u.set_version(table.standby.version);
  u.set_full(true);
  u.set_updates(table.rows.updates());
  u.set_clock(table.rows.clock());
  if (SeenCounts* seen = table.rows.seen(); seen != nullptr) {
    u.set_seen(std::string(reinterpret_cast<const char*>(seen->data()), seen->bytes()));
  }
  std::string* values = u.mutable_values();
  const int64_t row_bytes = table.rows.row_bytes();
  if (keep == nullptr) values->reserve(static_cast<size_t>(table.rows.num_rows() * row_bytes));
  RETURN_IF_ERROR(table.rows.ForEachRow([&](uint64_t id, const float* row, int64_t touched) {
    if (keep != nullptr && !keep(id)) return absl::OkStatus();
    u.add_ids(id);
    u.add_touched(touched);
    values->append(reinterpret_cast<const char*>(row), static_cast<size_t>(row_bytes));
    return absl::OkStatus();
  }));
  for (int64_t a : table.clocks.applied()) u.add_applied(a);
  return u;
}

absl::Status SparseTables::CheckUpdate(const Table& table, const TableUpdate& u) const {
  if (u.applied_size() != workers_) {
    return absl::InvalidArgumentError(absl::StrCat("replicate: ", u.applied_size(),
                                                   " applied clocks for ", workers_, " workers"));
  }
  for (int64_t a : u.applied()) {
    if (a < 0 || a > total_clocks_) {
      return absl::InvalidArgumentError(
          absl::StrCat("replicate: applied clock ", a, " outside [0, ", total_clocks_, "]"));
    }
  }
  if (u.version() < 0 || u.version() > (int64_t{1} << 62) || u.updates() < 0 || u.clock() < 0 ||
      u.clock() > total_clocks_) {
    return absl::InvalidArgumentError("replicate: a version, count or clock out of range");
  }
  const size_t floats = u.values().size() / sizeof(float);
  const size_t row = table.width + (u.full() ? table.state_floats : 0);
  if (u.values().size() % sizeof(float) != 0 || floats != u.ids_size() * row ||
      (u.full() && u.touched_size() != u.ids_size())) {
    return absl::InvalidArgumentError(absl::StrCat("replicate: table '", u.table(),
                                                   "': ", u.ids_size(), " rows and ", floats,
                                                   " values do not fit rows of ", row));
  }
  const SeenCounts* seen = table.rows.seen();
  if (u.full() && !u.seen().empty() &&
      (seen == nullptr || static_cast<int64_t>(u.seen().size()) != seen->bytes())) {
    return absl::InvalidArgumentError("replicate: admission counts of another size");
  }
  return CheckIds(table, u.ids());
}

absl::Status SparseTables::TakeFull(Table& table, const TableUpdate& u) {
  table.standby.version = -1;  // until every row is in
  table.rows.Reset(u.updates(), u.clock());
  if (SeenCounts* seen = table.rows.seen(); seen != nullptr && !u.seen().empty()) {
    std::memcpy(seen->mutable_data(), u.seen().data(), u.seen().size());
  }
  const std::vector<float> values = Floats(u.values());
  const size_t stride = table.rows.row_bytes() / sizeof(float);
  for (int i = 0; i < u.ids_size(); ++i) {
    RETURN_IF_ERROR(table.rows.Put(u.ids(i), values.data() + i * stride, u.touched(i)));
  }
  table.clocks.SetApplied({u.applied().begin(), u.applied().end()});
  table.standby.version = u.version();
  return absl::OkStatus();
}

absl::Status SparseTables::Replay(Table& table, const TableUpdate& u) {
  // The very update the primary made.
  absl::Status st;
  if (u.step()) {
    st = MakeMissing(table, u.ids());
    if (st.ok()) st = table.rows.Push(u.ids(), Floats(u.values()));
  }
  table.clocks.SetApplied({u.applied().begin(), u.applied().end()});
  table.standby.version = u.version();
  return st;
}

absl::Status SparseTables::Mirror(int home, const TableUpdate& u, bool* need_full) {
  *need_full = false;
  Table* table = Part(u.table(), home);
  if (table == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("replicate: server ", server_,
                                                   " keeps no copy of table '", u.table(),
                                                   "' of server ", home));
  }
  absl::MutexLock lock(&table->mu);
  RETURN_IF_ERROR(CheckUpdate(*table, u));
  if (table->standby.serving) {
    return absl::FailedPreconditionError(absl::StrCat(
        "replicate: server ", server_, " serves table '", u.table(), "' of server ", home));
  }
  absl::Status st;
  switch (table->standby.TakeOf(u.version(), u.full())) {
    case StandbyState::Take::kHeld:
      break;
    case StandbyState::Take::kNeedWhole:
      *need_full = true;
      break;
    case StandbyState::Take::kWhole:
      st = TakeFull(*table, u);
      break;
    case StandbyState::Take::kApply:
      st = Replay(*table, u);
      break;
  }
  // A change the copy could not take whole (its spill file failed): stale
  // until its primary's whole state fills it, never confirmed as held.
  if (!st.ok()) table->standby.version = -1;
  // Its clock moves with the primary's (and a copy of this server's own
  // rows writes their checkpoints, as a chunk's copy does).
  Advanced(*table);
  table->Publish();
  return st;
}

}  // namespace pstrain
