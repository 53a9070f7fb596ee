#include "server/sparse_tables.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace pstrain {

RowOptimizer RowOptimizerOf(const OptimizerSpec& spec) {
  RowOptimizer opt;
  switch (spec.type()) {
    case ADAGRAD:
      opt.type = RowOptimizer::Type::kAdagrad;
      break;
    case ADAM:
      opt.type = RowOptimizer::Type::kAdam;
      break;
    default:
      opt.type = RowOptimizer::Type::kSgd;
      break;
  }
  opt.lr = spec.learning_rate();
  opt.eps = spec.epsilon();
  opt.beta1 = spec.beta1();
  opt.beta2 = spec.beta2();
  return opt;
}

SparseTables::SparseTables(const JobSpec& job, int server, int servers)
    : server_(server), servers_(servers), workers_(job.num_workers()) {
  for (const TableSpec& spec : job.tables()) {
    TableConfig config;
    config.name = spec.name();
    config.width = spec.width();
    config.init_scale = spec.init_scale();
    config.seed = job.seed();
    config.optimizer = RowOptimizerOf(spec.optimizer());
    order_.push_back(spec.name());
    tables_.emplace(spec.name(), std::make_unique<Table>(std::move(config), spec.num_ids()));
  }
}

absl::StatusOr<int> SparseTables::Width(absl::string_view table) const {
  auto it = tables_.find(table);
  if (it == tables_.end()) {
    return absl::NotFoundError(absl::StrCat("the job declares no table '", table, "'"));
  }
  return it->second->width;
}

absl::StatusOr<SparseTables::Table*> SparseTables::Find(int worker, absl::string_view name) {
  if (worker < 0 || worker >= workers_) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    return absl::InvalidArgumentError(
        absl::StrCat("worker ", worker, " is not one of the job's ", workers_));
  }
  auto it = tables_.find(name);
  if (it == tables_.end()) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    return absl::NotFoundError(absl::StrCat("the job declares no table '", name, "'"));
  }
  return it->second.get();
}

absl::Status SparseTables::CheckIds(const Table& table, absl::Span<const uint64_t> ids) const {
  for (uint64_t id : ids) {
    if (table.num_ids > 0 && id >= table.num_ids) {
      return absl::OutOfRangeError(
          absl::StrCat("id ", id, " is beyond the table's num_ids (", table.num_ids, ")"));
    }
    if (const int owner = ServerOfRow(id, servers_); owner != server_) {
      return absl::InvalidArgumentError(
          absl::StrCat("id ", id, " is server ", owner, "'s, not this one's (", server_, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status SparseTables::Refuse(Table& table, absl::Status st) {
  refused_.fetch_add(1, std::memory_order_relaxed);
  absl::MutexLock lock(&table.mu);
  ++table.refused;
  return st;
}

absl::Status SparseTables::Pull(int worker, absl::string_view name,
                                absl::Span<const uint64_t> ids, std::vector<float>* out) {
  absl::StatusOr<Table*> found = Find(worker, name);
  if (!found.ok()) return found.status();
  Table& table = **found;
  const int width = table.width;
  const int64_t bytes = static_cast<int64_t>(ids.size()) * (width + table.state_floats) * 4;
  if (bytes > kMaxRowBytesPerRequest) {
    return Refuse(table, absl::InvalidArgumentError(absl::StrCat(
                             "a pull of ", ids.size(), " rows of ", width, " floats (and ",
                             table.state_floats, " of state) is over ", kMaxRowBytesPerRequest,
                             " bytes")));
  }
  if (absl::Status st = CheckIds(table, ids); !st.ok()) return Refuse(table, std::move(st));
  out->resize(ids.size() * static_cast<size_t>(width));
  absl::MutexLock lock(&table.mu);
  table.rows.Pull(ids, out->data());
  table.rows_pulled += static_cast<int64_t>(ids.size());
  return absl::OkStatus();
}

absl::Status SparseTables::Push(int worker, absl::string_view name,
                                absl::Span<const uint64_t> ids, absl::Span<const float> grads) {
  absl::StatusOr<Table*> found = Find(worker, name);
  if (!found.ok()) return found.status();
  Table& table = **found;
  const int width = table.width;
  if (static_cast<int64_t>(grads.size()) * 4 > kMaxRowBytesPerRequest) {
    return Refuse(table, absl::InvalidArgumentError(absl::StrCat(
                             "a push of ", grads.size(), " floats is over ",
                             kMaxRowBytesPerRequest, " bytes")));
  }
  if (grads.size() != ids.size() * static_cast<size_t>(width)) {
    return Refuse(table, absl::InvalidArgumentError(
                             absl::StrCat("a push of ", ids.size(), " rows of width ", width,
                                          " needs ", ids.size() * width, " floats, got ",
                                          grads.size())));
  }
  if (absl::Status st = CheckIds(table, ids); !st.ok()) return Refuse(table, std::move(st));
  absl::Status st;
  {
    absl::MutexLock lock(&table.mu);
    st = table.rows.Push(ids, grads);
    if (st.ok()) table.rows_pushed += static_cast<int64_t>(ids.size());
  }
  return st.ok() ? st : Refuse(table, std::move(st));
}

std::vector<TableStatus> SparseTables::Status() const {
  std::vector<TableStatus> out;
  for (const std::string& name : order_) {
    const Table& table = *tables_.find(name)->second;
    absl::MutexLock lock(&table.mu);
    TableStatus& st = out.emplace_back();
    st.set_name(name);
    st.set_rows(table.rows.num_rows());
    const int width = table.width;
    st.set_bytes(table.rows.num_rows() *
                 (width + table.rows.config().optimizer.StateFloats(width)) * 4);
    st.set_rows_pulled(table.rows_pulled);
    st.set_rows_pushed(table.rows_pushed);
    st.set_updates(table.rows.updates());
    st.set_refused(table.refused);
  }
  return out;
}

}  // namespace pstrain
