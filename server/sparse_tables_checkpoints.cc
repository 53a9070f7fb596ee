// SparseTables' checkpoints (server/sparse_tables.h): each own part's rows
// written when its clock is due or asked for late, the clock every part
// has, and the restore -- under a changed placement from every server's
// files, each row kept by the server its bucket names now.
#include <filesystem>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_names.h"
#include "common/placement.h"
#include "common/status_macros.h"
#include "server/sparse_tables.h"
#include "server/table_checkpoint.h"

namespace pstrain {

void SparseTables::WriteCheckpoint(Table& table, int64_t clock) {
  table.checkpoint_tried = clock;  // a failed write is not tried again at each push
  const std::string& name = table.rows.config().name;
  const absl::Status st = WriteTableCheckpoint(
      TableCheckpointPath(checkpoint_dir_, server_, clock, name), server_, clock, table.rows);
  if (st.ok()) {
    absl::MutexLock lock(&table.status_mu);
    table.checkpoints.insert(clock);
  } else {
    schedule_->Failed(absl::StrCat("table ", name), clock, st);
  }
}

void SparseTables::CheckpointAsked(int64_t clock) {
  if (schedule_ == nullptr || consistency_ != BSP) return;
  for (Table* table : OwnParts()) {
    absl::MutexLock lock(&table->mu);
    // At `clock` still (its round open): its rows are those of the clock.
    if (table->clocks.MinApplied() == clock && table->checkpoint_tried < clock) {
      WriteCheckpoint(*table, clock);
    }
  }
}

void SparseTables::SetCheckpointing(const std::string& dir, const CheckpointSchedule* schedule) {
  checkpoint_dir_ = dir;
  schedule_ = schedule;
}

int64_t SparseTables::CheckpointClock(int64_t dense_clock) const {
  if (tables_.empty() || schedule_ == nullptr || !schedule_->enabled()) return dense_clock;
  std::set<int64_t> common;
  bool first = true;
  for (const Table* table : OwnParts()) {
    absl::MutexLock lock(&table->status_mu);
    if (first) {
      common = table->checkpoints;
      first = false;
      continue;
    }
    std::set<int64_t> both;
    for (int64_t c : table->checkpoints) {
      if (common.count(c) > 0) both.insert(c);
    }
    common = std::move(both);
  }
  for (auto it = common.rbegin(); it != common.rend(); ++it) {
    if (*it <= dense_clock &&
        std::filesystem::exists(CheckpointPath(checkpoint_dir_, server_, *it))) {
      return *it;
    }
  }
  return 0;
}

void SparseTables::ForgetCheckpointsBefore(int64_t clock) {
  for (Table* table : OwnParts()) {
    absl::MutexLock lock(&table->status_mu);
    table->checkpoints.erase(table->checkpoints.begin(), table->checkpoints.lower_bound(clock));
  }
}

absl::Status SparseTables::Restore(int64_t generation, int64_t clock,
                                   const std::vector<int>& servers) {
  for (auto& [name, parts] : tables_) {
    for (auto& [home, table] : parts) {
      absl::MutexLock lock(&table->mu);
      RETURN_IF_ERROR(RestorePart(*table, generation, clock, servers));
    }
  }
  return absl::OkStatus();
}

absl::Status SparseTables::ReadRows(Table& table, int64_t clock, const std::vector<int>& servers) {
  const std::string& name = table.rows.config().name;
  if (placement_.version() <= 1) {
    return ReadTableCheckpoint(TableCheckpointPath(checkpoint_dir_, server_, clock, name), server_,
                               clock, &table.rows);
  }
  // Every server with chunk files of the clock had its part of each table.
  std::vector<TablePart> parts;
  for (int s : servers) parts.push_back({s, TableCheckpointPath(checkpoint_dir_, s, clock, name)});
  return ReadTableCheckpoints(parts, clock, &table.rows, [this](uint64_t id) {
    return OwnerOfRow(placement_, servers_, id) == server_;
  });
}

absl::Status SparseTables::RestorePart(Table& table, int64_t generation, int64_t clock,
                                       const std::vector<int>& servers) {
  const bool own = table.home == server_;
  if (own && clock > 0) {  // the files first: a malformed one changes nothing
    RETURN_IF_ERROR(ReadRows(table, clock, servers));
  } else {
    table.rows.Reset(0, 0);
  }
  StartGeneration(table, generation, clock);
  absl::MutexLock status_lock(&table.status_mu);
  if (own && clock > 0) table.checkpoints.insert(clock);
  return absl::OkStatus();
}

void SparseTables::StartGeneration(Table& table, int64_t generation, int64_t clock) {
  table.clocks.Restore(clock);
  table.round = Round();
  table.rows.Advance(clock);
  table.checkpoint_tried = clock;
  table.generation = generation;
  // A rollback serves every part from its own server again; the standby
  // copies wait for their primary's whole state.
  table.standby.Reset(table.home == server_, table.clocks.applied());
  table.adopted = false;
  table.Publish();
  absl::MutexLock status_lock(&table.status_mu);
  table.checkpoints.clear();
}

}  // namespace pstrain
