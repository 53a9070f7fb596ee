#include "server/sparse_tables.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_names.h"
#include "common/job_sizes.h"
#include "common/job_spec.h"
#include "common/partition.h"
#include "common/placement.h"
#include "common/status_macros.h"
#include "server/table_checkpoint.h"
#include "spdlog/spdlog.h"

namespace pstrain {

namespace {

// Why `worker`'s push of `clock` is not its next one.
absl::Status OutOfOrder(const ChunkClocks& clocks, int worker, int64_t clock) {
  const int64_t applied = clocks.applied()[worker];
  if (clocks.pushed(worker)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a push of clock ", clock, " while worker ", worker, "'s push of clock ",
                     applied, " waits in the table's open round (pull first: BSP)"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("a push of clock ", clock, " but worker ", worker, "'s next is ", applied));
}

}  // namespace

absl::Status CheckRowBytes(int64_t bytes, absl::string_view what) {
  if (bytes <= kMaxRowBytesPerRequest) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", bytes, " bytes are over the ",
                                                 kMaxRowBytesPerRequest,
                                                 " a row request may carry"));
}

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

SparseTables::SparseTables(const JobSpec& job, int server, int servers,
                           const std::string& spill_dir, Placement placement)
    : server_(server),
      servers_(servers),
      placement_(std::move(placement)),
      workers_(job.num_workers()),
      standby_copies_(job.standby_copies()),
      total_clocks_(TotalClocks(job)),
      consistency_(TableConsistency(job)),
      nonfinite_(job.optimizer().allow_nonfinite()) {
  for (const TableSpec& spec : job.tables()) {
    TableConfig config;
    config.name = spec.name();
    config.width = spec.width();
    config.init_scale = spec.init_scale();
    config.seed = job.seed();
    config.optimizer = RowOptimizerOf(spec.optimizer());
    config.resident_bytes = spec.memory_budget_bytes();
    config.spill_dir = spill_dir;
    config.admit_after = spec.admit_after();
    config.expire_after = spec.expire_after_clocks();
    order_.push_back(spec.name());
    auto& parts = tables_[spec.name()];
    for (int home : HeldHomes(server, servers, standby_copies_)) {
      auto table = std::make_unique<Table>(config, spec.num_ids(), workers_, home, consistency_);
      absl::MutexLock lock(&table->mu);
      // A standby copy is filled by its primary (as a chunk's).
      table->standby.Reset(home == server, table->clocks.applied());
      table->Publish();
      standby_.Add(home, table.get());
      parts.emplace(home, std::move(table));
    }
  }
}

SparseTables::Table* SparseTables::Part(absl::string_view name, int home) const {
  auto it = tables_.find(name);
  if (it == tables_.end()) return nullptr;
  auto part = it->second.find(home);
  return part == it->second.end() ? nullptr : part->second.get();
}

std::vector<SparseTables::Table*> SparseTables::OwnParts() const {
  std::vector<Table*> out;
  for (const std::string& name : order_) out.push_back(Part(name, server_));
  return out;
}

absl::StatusOr<int> SparseTables::Width(absl::string_view table) const {
  auto it = tables_.find(table);
  if (it == tables_.end()) {
    return absl::NotFoundError(absl::StrCat("the job declares no table '", table, "'"));
  }
  return it->second.begin()->second->width;
}

absl::StatusOr<SparseTables::Table*> SparseTables::Find(int worker, absl::string_view name,
                                                        int home) {
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
  Table* part = Part(name, home);
  if (part == nullptr) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    return absl::InvalidArgumentError(absl::StrCat("server ", server_, " holds no part of table '",
                                                   name, "' of server ", home, "'s rows"));
  }
  return part;
}

absl::Status SparseTables::CheckServing(const Table& table) {
  if (table.standby.serving) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("this server keeps a standby copy of table '",
                                             table.rows.config().name, "''s rows of server ",
                                             table.home, "; another server serves them now"));
}

absl::Status SparseTables::CheckGeneration(const Table& table, int64_t generation) {
  if (generation == table.generation) return absl::OkStatus();
  if (generation < table.generation) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the cluster rolled back to clock ", table.clocks.MinApplied(), " (generation ",
        table.generation, "); this request is of generation ", generation));
  }
  return absl::UnavailableError(absl::StrCat("table '", table.rows.config().name,
                                             "' has not restored generation ", generation, " yet"));
}

absl::Status SparseTables::CheckIds(const Table& table, absl::Span<const uint64_t> ids) const {
  for (uint64_t id : ids) {
    if (table.num_ids > 0 && id >= table.num_ids) {
      return absl::OutOfRangeError(
          absl::StrCat("id ", id, " is beyond the table's num_ids (", table.num_ids, ")"));
    }
    if (const int owner = OwnerOfRow(placement_, servers_, id); owner != table.home) {
      return absl::InvalidArgumentError(
          absl::StrCat("id ", id, " is server ", owner, "'s, not server ", table.home, "'s"));
    }
  }
  return absl::OkStatus();
}

absl::Status SparseTables::Refuse(Table& table, absl::Status st) {
  refused_.fetch_add(1, std::memory_order_relaxed);
  absl::MutexLock lock(&table.mu);
  ++table.refused;
  table.Publish();
  return st;
}

absl::Status SparseTables::CheckPull(int worker, int64_t generation, absl::string_view name,
                                     int home, absl::Span<const uint64_t> ids, int64_t min_clock) {
  ASSIGN_OR_RETURN(Table * table, CheckedPull(worker, name, home, ids));
  int64_t reachable;
  {
    absl::MutexLock lock(&table->mu);
    RETURN_IF_ERROR(CheckGeneration(*table, generation));
    RETURN_IF_ERROR(CheckServing(*table));
    // The furthest the worker's pushes so far can take the table: a pull
    // waiting past it would wait for the worker itself.
    reachable = table->clocks.applied()[worker] + (table->clocks.pushed(worker) ? 1 : 0);
  }
  if (min_clock > reachable) {
    return Refuse(*table, absl::InvalidArgumentError(absl::StrCat(
                              "a pull waiting for clock ", min_clock, " but worker ", worker,
                              " has pushed this table up to clock ", reachable - 1,
                              " (push each clock before pulling the next)")));
  }
  return absl::OkStatus();
}

absl::StatusOr<SparseTables::Table*> SparseTables::CheckedPull(int worker, absl::string_view name,
                                                               int home,
                                                               absl::Span<const uint64_t> ids) {
  absl::StatusOr<Table*> found = Find(worker, name, home);
  if (!found.ok()) return found.status();
  Table& table = **found;
  const int width = table.width;
  const int64_t bytes = static_cast<int64_t>(ids.size()) * (width + table.state_floats) * 4;
  if (absl::Status st =
          CheckRowBytes(bytes, absl::StrCat("a pull of ", ids.size(), " rows of ", width,
                                            " floats (and ", table.state_floats, " of state)"));
      !st.ok()) {
    return Refuse(table, std::move(st));
  }
  if (absl::Status st = CheckIds(table, ids); !st.ok()) return Refuse(table, std::move(st));
  return &table;
}

absl::Status SparseTables::Pull(int worker, int64_t generation, absl::string_view name, int home,
                                absl::Span<const uint64_t> ids, std::vector<float>* out) {
  ASSIGN_OR_RETURN(Table * found, CheckedPull(worker, name, home, ids));
  Table& table = *found;
  out->resize(ids.size() * static_cast<size_t>(table.width));
  absl::MutexLock lock(&table.mu);
  RETURN_IF_ERROR(CheckGeneration(table, generation));
  RETURN_IF_ERROR(CheckServing(table));
  const absl::Status st = table.rows.Pull(ids, out->data());
  if (st.ok()) table.rows_pulled += static_cast<int64_t>(ids.size());
  table.Publish();
  return st;
}

bool SparseTables::Readable(int64_t generation, absl::string_view name, int home,
                            int64_t min_clock) const {
  const Table* part = Part(name, home);
  if (part == nullptr) return true;
  const Table& table = *part;
  absl::MutexLock lock(&table.mu);
  return table.generation != generation || !table.standby.serving ||
         table.clocks.MinApplied() >= min_clock;
}

absl::Status SparseTables::Push(int worker, int64_t generation, absl::string_view name, int home,
                                int64_t clock, int num_samples, absl::Span<const uint64_t> ids,
                                absl::Span<const float> grads) {
  absl::StatusOr<Table*> found = Find(worker, name, home);
  if (!found.ok()) return found.status();
  Table& table = **found;
  if (absl::Status st = CheckRowBytes(static_cast<int64_t>(grads.size()) * 4,
                                      absl::StrCat("a push of ", grads.size(), " floats"));
      !st.ok()) {
    return Refuse(table, std::move(st));
  }
  if (num_samples < 0) {
    return Refuse(table,
                  absl::InvalidArgumentError(absl::StrCat("a push of ", num_samples, " samples")));
  }
  if (absl::Status st = CheckIds(table, ids); !st.ok()) return Refuse(table, std::move(st));
  absl::Status st;
  {
    absl::MutexLock lock(&table.mu);
    // Another generation's push is refused, not counted (the worker's client
    // resynchronises; nothing was wrong with it).
    if (const absl::Status gen = CheckGeneration(table, generation); !gen.ok()) return gen;
    if (const absl::Status served = CheckServing(table); !served.ok()) return served;
    if (table.adopted) st = MakeMissing(table, ids);
    if (st.ok()) st = table.rows.CheckPush(ids, grads);
    if (st.ok() && !table.clocks.live(worker)) {
      st = absl::FailedPreconditionError(
          absl::StrCat("worker ", worker, " was declared dead: its pushes are not taken"));
    }
    bool duplicate = false;
    if (st.ok()) {
      st = table.clocks.Classify(worker, clock, /*chunk=*/-1, /*at_once=*/false, &duplicate);
      if (!st.ok()) st = OutOfOrder(table.clocks, worker, clock);
    }
    if (st.ok() && !duplicate) {
      // The finiteness rule (server/nonfinite.h): a push with a NaN or an
      // Inf is taken as one of no rows and no samples.
      const bool admitted = nonfinite_.Admits(
          grads, worker, clock, [name] { return absl::StrCat("table '", name, "'"); });
      if (!admitted) ++table.nonfinite_skipped;
      const absl::Span<const uint64_t> taken_ids = admitted ? ids : absl::Span<const uint64_t>();
      const absl::Span<const float> taken = admitted ? grads : absl::Span<const float>();
      table.rows_pushed += static_cast<int64_t>(taken_ids.size());
      if (consistency_ == BSP) {
        Collect(table, worker, admitted ? num_samples : 0, taken_ids, taken);
      } else {
        // Checked above: fails only on the spill file. A skipped push is no update.
        if (admitted) st = table.rows.Push(ids, grads);
        table.clocks.Applied(worker, clock);
        Ship(table, admitted, ids, grads, /*failed=*/!st.ok());
        Advanced(table);
      }
    }
    table.Publish();
  }
  return st.ok() ? st : Refuse(table, std::move(st));
}

void SparseTables::Collect(Table& table, int worker, int num_samples,
                           absl::Span<const uint64_t> ids, absl::Span<const float> grads) {
  Round& round = table.round;
  const int width = table.width;
  const int64_t samples = num_samples;  // an empty share weighs nothing
  const float weight = static_cast<float>(samples);
  for (size_t i = 0; i < ids.size(); ++i) {
    const float* g = grads.data() + i * width;
    auto [it, fresh] = round.index.try_emplace(ids[i], static_cast<int64_t>(round.ids.size()));
    if (fresh) {
      round.ids.push_back(ids[i]);
      round.sum.insert(round.sum.end(), width, 0.0f);
    }
    float* sum = round.sum.data() + it->second * width;
    for (int k = 0; k < width; ++k) sum[k] += weight * g[k];
  }
  round.samples += samples;
  table.clocks.Pushed(worker);
  if (table.clocks.RoundComplete()) CloseRound(table);
}

void SparseTables::CloseRound(Table& table) {
  Round& round = table.round;
  const float samples = static_cast<float>(round.samples);
  for (float& v : round.sum) v /= samples;
  // Every row of the round was checked when its push came, and no row is
  // ever dropped: only the spill file can fail it (the server goes on; the
  // error is counted and logged). A round of no samples -- every push in it
  // skipped by the finiteness rule -- is no update (as a chunk's).
  const absl::Status st =
      round.samples == 0 ? absl::OkStatus() : table.rows.Push(round.ids, round.sum);
  if (!st.ok()) {
    ++table.refused;
    spdlog::error("table {}: a round's update failed: {}", table.rows.config().name,
                  std::string(st.message()));
  }
  table.clocks.NextRound();
  Ship(table, round.samples > 0, round.ids, round.sum, /*failed=*/!st.ok());
  table.round = Round();
  Advanced(table);
}

void SparseTables::Advanced(Table& table) {
  const int64_t clock = table.clocks.MinApplied();
  table.rows.Advance(clock);
  // This server's own part only (the checkpoint files are by server).
  if (table.home != server_ || schedule_ == nullptr ||
      !schedule_->Due(clock, table.checkpoint_tried)) {
    return;
  }
  WriteCheckpoint(table, clock);
}

void SparseTables::RemoveWorker(int worker) {
  standby_.RemoveWorker(worker, [&](StandbyPart& part) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    Table& table = static_cast<Table&>(part);  // standby_ holds tables' parts only
    // (A standby copy's rounds are its primary's.)
    if (table.standby.serving && consistency_ == BSP && table.clocks.RoundComplete()) {
      CloseRound(table);
    }
    Advanced(table);
    table.Publish();
  });
}

void SparseTables::Table::Publish() {
  TableStatus st;
  st.set_name(rows.config().name);
  st.set_rows(rows.num_rows());
  const int64_t row_bytes = rows.row_bytes();
  st.set_bytes(rows.num_rows() * row_bytes);
  const TableRows where = rows.rows();
  st.set_rows_resident(where.resident);
  st.set_rows_on_disk(where.on_disk);
  st.set_resident_bytes(rows.memory_bytes());
  st.set_disk_bytes(where.on_disk * row_bytes);
  st.set_rows_spilled(where.spilled);
  st.set_rows_loaded(where.loaded);
  st.set_rows_created(where.created);
  st.set_rows_expired(where.expired);
  st.set_rows_dropped(where.dropped);
  st.set_rows_pulled(rows_pulled);
  st.set_rows_pushed(rows_pushed);
  st.set_updates(rows.updates());
  st.set_refused(refused);
  st.set_nonfinite_skipped(nonfinite_skipped);
  st.set_consistency(consistency);
  st.set_clock(clocks.MinApplied());
  absl::MutexLock lock(&status_mu);
  published = std::move(st);
}

std::vector<TableStatus> SparseTables::Status() const {
  std::vector<TableStatus> out;
  for (const Table* table : OwnParts()) {
    absl::MutexLock lock(&table->status_mu);
    out.push_back(table->published);
  }
  return out;
}

}  // namespace pstrain
