// SparseTables in a move of the placement (server/sparse_tables.h): the
// rows this server's part gives another server, as they are at the
// switch clock, and a part made anew at the switch from the rows it kept
// and those handed over to it -- no file read or written.
#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/placement.h"
#include "common/status_macros.h"
#include "server/sparse_tables.h"

namespace pstrain {

absl::StatusOr<TableUpdate> SparseTables::HandOver(const std::string& name, int64_t clock,
                                                   const std::function<bool(uint64_t)>& goes) {
  Table* table = Part(name, server_);
  if (table == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("handover: the job declares no table '", name, "'"));
  }
  absl::MutexLock lock(&table->mu);
  const int64_t applied = table->clocks.MinApplied();
  if (applied < clock) {
    return absl::UnavailableError(absl::StrCat("handover: table '", name, "' has applied ",
                                               applied, " of the ", clock, " clocks yet"));
  }
  const std::vector<int64_t>& each = table->clocks.applied();
  if (std::any_of(each.begin(), each.end(), [clock](int64_t a) { return a > clock; })) {
    return absl::FailedPreconditionError(
        absl::StrCat("handover: table '", name, "' has gone past clock ", clock));
  }
  return WholeState(*table, goes);
}

bool SparseTables::Keeps(uint64_t id) const { return OwnerOfRow(placement_, servers_, id) == server_; }

bool SparseTables::Reached(int64_t clock) const {
  for (Table* table : OwnParts()) {
    absl::MutexLock lock(&table->mu);
    if (table->clocks.MinApplied() < clock) return false;
  }
  return true;
}

absl::Status SparseTables::Adopt(
    int64_t generation, int64_t clock,
    const std::function<absl::StatusOr<std::vector<TableUpdate>>(const std::string&)>& rows) {
  for (const std::string& name : order_) {
    ASSIGN_OR_RETURN(const std::vector<TableUpdate> held, rows(name));
    for (auto& [home, table] : tables_[name]) {
      absl::MutexLock lock(&table->mu);
      if (home == server_) {
        RETURN_IF_ERROR(PutRows(*table, held, clock));
      } else {
        table->rows.Reset(0, 0);
      }
      StartGeneration(*table, generation, clock);
    }
  }
  return absl::OkStatus();
}

absl::Status SparseTables::PutRows(Table& table, const std::vector<TableUpdate>& held,
                                   int64_t clock) {
  // Every part counts the same updates under BSP; under SSP and ASP each
  // its own, and the most goes on.
  int64_t updates = 0;
  for (const TableUpdate& u : held) updates = std::max(updates, u.updates());
  table.rows.Reset(updates, clock);
  const size_t stride = table.rows.row_bytes() / sizeof(float);
  for (const TableUpdate& u : held) {
    if (u.values().size() != u.ids_size() * stride * sizeof(float) ||
        u.touched_size() != u.ids_size()) {
      return absl::InvalidArgumentError(absl::StrCat("handover: table '", u.table(), "': ",
                                                     u.ids_size(), " rows do not fit its values"));
    }
    RETURN_IF_ERROR(CheckIds(table, u.ids()));
    std::vector<float> row(stride);  // (a protobuf string need not be aligned)
    for (int i = 0; i < u.ids_size(); ++i) {
      std::memcpy(row.data(), u.values().data() + i * stride * sizeof(float),
                  stride * sizeof(float));
      RETURN_IF_ERROR(table.rows.Put(u.ids(i), row.data(), u.touched(i)));
    }
  }
  return absl::OkStatus();
}

}  // namespace pstrain
