// A server's part of the job's sparse tables (JobSpec.tables): for each, a
// SparseTable (server/sparse_table.h) of the rows whose ids hash to this
// server, the checks a pull or push by id must pass, and the counters Status
// reports, and each table's clocks (server/chunk_clocks.h, as a chunk's):
// under the job's table consistency (JobSpec.table_consistency) a BSP
// table collects a round -- every live worker's push of the clock, empty or
// not, summed row by row weighted by the workers' samples -- and applies it
// as one update when the last comes; SSP and ASP tables apply each push as
// it comes. A pull's read guarantee (min_clock) is checked by Readable: the
// service parks pulls until it holds. With standby copies
// (JobSpec.standby_copies) a server holds a part of each table per home server
// it holds (HeldHomes: its own, and the previous server's standby copy);
// a served part's every change goes to its standby through a TableSink,
// which replays it (server/sparse_tables_standby.cc). Knows nothing of
// gRPC: server/ps_service.cc is the glue.
#ifndef PSTRAIN_SERVER_SPARSE_TABLES_H_
#define PSTRAIN_SERVER_SPARSE_TABLES_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "proto/job.pb.h"
#include "proto/placement.pb.h"
#include "proto/ps.pb.h"
#include "proto/status.pb.h"
#include "server/checkpoint_schedule.h"
#include "server/chunk_clocks.h"
#include "server/nonfinite.h"
#include "server/sparse_table.h"
#include "server/standby_part.h"
#include "server/standby_parts.h"

namespace pstrain {

// The most bytes one pull may ask for or one push carry (the reply or
// request is built whole in memory), counting for a pull the rows' optimizer
// state too, which the rows it makes hold. A table's rows in memory are
// bounded by its TableSpec.memory_budget_bytes (outside --memory_budget).
inline constexpr int64_t kMaxRowBytesPerRequest = int64_t{64} << 20;
// The one check of that limit: INVALID_ARGUMENT when `bytes` of `what` (a
// pull's rows with their state, a push's gradients, received or decoded)
// pass it.
absl::Status CheckRowBytes(int64_t bytes, absl::string_view what);

// A table's row optimizer from the job's (validated) TableSpec.
RowOptimizer RowOptimizerOf(const OptimizerSpec& spec);

// Thread-safe: each table has its own lock.
class SparseTables {
 public:
  // Where a served part's changes go (standby copies): a change in order,
  // or a part whose whole state its standby needs. Called with the part's
  // lock held.
  class TableSink {
   public:
    virtual ~TableSink() = default;
    virtual void ChangedTable(int home, TableUpdate update) = 0;
    virtual void NeedWholeTable(int home, const std::string& table) = 0;
  };

  // Server `server` of `job` (validated, defaults applied) of `servers`
  // initial servers, holding the rows `placement` gives it (OwnerOfRow:
  // version 0, the initial spread); tables with a memory budget spill
  // their rows into files in `spill_dir` (empty: $TMPDIR, else /tmp).
  SparseTables(const JobSpec& job, int server, int servers, const std::string& spill_dir = "",
               Placement placement = Placement());

  // The table's row width; NOT_FOUND when the job declares no such table.
  absl::StatusOr<int> Width(absl::string_view table) const;
  // Worker `worker`'s pull in cluster generation `generation` of the rows
  // of `ids` (ids.size() x width floats into *out, in order; an id may
  // repeat), making the missing ones. Refused, nothing made: NOT_FOUND (no
  // such table), OUT_OF_RANGE (an id at or beyond num_ids),
  // INVALID_ARGUMENT (a worker the job does not have, an id of another
  // server, more than kMaxRowBytesPerRequest), FAILED_PRECONDITION (an
  // older generation than the table's: the cluster rolled back),
  // UNAVAILABLE (a newer one: not restored yet).
  // `home`: the server whose part the ids are of (this one's, or with
  // standby copies one it serves for: UNAVAILABLE when it keeps only a standby
  // copy of it, INVALID_ARGUMENT when it holds none).
  absl::Status Pull(int worker, int64_t generation, absl::string_view table, int home,
                    absl::Span<const uint64_t> ids, std::vector<float>* out);
  // Pull's checks, before a pull waits for its read guarantee, and
  // INVALID_ARGUMENT for a `min_clock` beyond what the worker's pushes so
  // far can reach (it would wait for itself). Counted when refused.
  absl::Status CheckPull(int worker, int64_t generation, absl::string_view table, int home,
                         absl::Span<const uint64_t> ids, int64_t min_clock);
  // Whether a pull of generation `generation` with the read guarantee
  // `min_clock` may be answered now: `table`'s rows hold every live
  // worker's pushes of the iterations before `min_clock`. True for a pull
  // that would be refused (a table the job does not declare, another
  // generation): it is answered, not parked.
  bool Readable(int64_t generation, absl::string_view table, int home, int64_t min_clock) const;
  // Worker `worker`'s push of iteration `clock` to `table`: the gradients
  // `grads` (ids.size() x width floats) of the rows of `ids` (distinct), of
  // `num_samples` samples. Under BSP it joins the round and the last live
  // worker's push applies the round's mean (each gradient weighted by its
  // samples, the sum divided by the round's) as one update;
  // else it is one update at once. A repeat of a push already taken is OK
  // and changes nothing. Refused, nothing applied: those of Pull, and
  // INVALID_ARGUMENT for a wrong size, a repeated id or a clock out of the
  // worker's order, FAILED_PRECONDITION for a row no pull made or a worker
  // declared dead.
  // With standby copies a part promoted from a standby copy makes the rows a
  // push names that no pull made here (they were pulled from the server it
  // took over from; a row's start is a function of its id).
  absl::Status Push(int worker, int64_t generation, absl::string_view table, int home,
                    int64_t clock, int num_samples, absl::Span<const uint64_t> ids,
                    absl::Span<const float> grads);
  // The worker was declared dead: it is left out of every table's rounds
  // (closing those it alone held open) and read guarantees.
  void RemoveWorker(int worker);
  // Checkpoints: each table writes its rows into `dir`
  // (server/table_checkpoint.h) when `schedule` says its clock is due (the
  // chunks' schedule: server/shard.h). Call before the job starts; the
  // schedule outlives the tables. The files are deleted by the server's
  // CheckpointWriter, with the chunks' (Rollback, Prune).
  void SetCheckpointing(const std::string& dir, const CheckpointSchedule* schedule);
  // A checkpoint of `clock` was asked for (Shard::AskCheckpoint). Under BSP
  // a part already at `clock` -- its rows pushed before the ask reached
  // this server with a dense push -- writes it now, its rows still those of
  // the clock (the round of `clock` is not applied).
  void CheckpointAsked(int64_t clock);
  // The newest clock at or below `dense_clock` (the chunks' newest
  // checkpoint) whose files this server has for the chunks and every
  // table: what the server reports complete. `dense_clock` without tables.
  int64_t CheckpointClock(int64_t dense_clock) const;
  // A rollback to `clock` in generation `generation`: every table's clocks
  // are there, its open round dropped, and its rows those of its checkpoint
  // of `clock` (0: no row); from then on it takes requests of `generation`
  // only (each table as soon as it is restored, under its lock).
  // INVALID_ARGUMENT or NOT_FOUND when a table's file is malformed or
  // missing. Under a placement a move changed (version > 1), the rows of
  // this server's part come from the files of every server of `servers`
  // (those with files of `clock`: a checkpoint written under another
  // placement restores), each row kept by the server its bucket names.
  absl::Status Restore(int64_t generation, int64_t clock, const std::vector<int>& servers = {});
  // A move (server/sparse_tables_handover.cc): the whole state of the rows
  // of this server's own part of `table` for which `goes(id)`, as they are
  // once every update of the iterations before `clock` is applied.
  // INVALID_ARGUMENT for a table the job does not declare, UNAVAILABLE
  // before the part reached `clock` (ask again), FAILED_PRECONDITION once
  // it went past it; a spill file's read error.
  absl::StatusOr<TableUpdate> HandOver(const std::string& table, int64_t clock,
                                       const std::function<bool(uint64_t id)>& goes);
  // Whether this server holds row `id` by its placement.
  bool Keeps(uint64_t id) const;
  // Whether every own part has applied every update of the iterations
  // before `clock`.
  bool Reached(int64_t clock) const;
  // A move's switch: as Restore to `clock` in `generation`, but each own
  // part's rows are those of `rows(table)` -- whole states (HandOver's)
  // of the rows this server holds under its placement, from the parts
  // that held them until now, this server's and others' -- not a file's.
  // INVALID_ARGUMENT for rows that do not fit the table or are not this
  // server's; `rows`' errors.
  absl::Status Adopt(
      int64_t generation, int64_t clock,
      const std::function<absl::StatusOr<std::vector<TableUpdate>>(const std::string& table)>&
          rows);
  // The files of clocks before `clock` were deleted (a newer complete set
  // exists): they no longer count in CheckpointClock.
  void ForgetCheckpointsBefore(int64_t clock);

  // Standby (server/sparse_tables_standby.cc), as ChunkStore's: where
  // served parts' changes go (null: nowhere; before the job starts).
  void SetSink(TableSink* sink) { sink_ = sink; }
  // Its parts as standby parts (roles, copies forgotten, what Status
  // reports: server/standby_parts.h).
  StandbyParts& standby() { return standby_; }
  const StandbyParts& standby() const { return standby_; }
  // Whether worker `worker`'s push of `clock` to `home`'s part of `table`
  // is held by the part's standby (true without standby copies); false once the
  // part is no longer served here.
  bool Replicated(int home, absl::string_view table, int worker, int64_t clock) const;
  // Whether this server serves `home`'s part of `table`.
  bool Served(int home, absl::string_view table) const;
  // The standby holds `home`'s part of `table` as of `version`, with
  // `applied` clocks.
  void Confirmed(int home, const std::string& table, int64_t version,
                 const std::vector<int64_t>& applied);
  // The whole state of `home`'s served part of `table`.
  absl::StatusOr<TableUpdate> FullUpdate(int home, const std::string& table);
  // A standby copy of `home`'s part takes its primary's change: replayed
  // on top of the version before it, taken whole, ignored when held
  // already; *need_full when it cannot follow. INVALID_ARGUMENT for a
  // malformed change, FAILED_PRECONDITION for a part served here.
  absl::Status Mirror(int home, const TableUpdate& update, bool* need_full);

  // Per table, in the job's order: this server's own part.
  std::vector<TableStatus> Status() const;
  // Pushes the finiteness rule skipped (server/nonfinite.h), every table's.
  int64_t nonfinite_skipped() const { return nonfinite_.skipped(); }
  // Requests refused, those naming no table included.
  int64_t refused() const { return refused_.load(std::memory_order_relaxed); }
  // Counts a request refused before it reached a table (malformed).
  void CountRefused() { refused_.fetch_add(1, std::memory_order_relaxed); }
  bool empty() const { return tables_.empty(); }
  int standby_copies() const { return standby_copies_; }
  int size() const { return static_cast<int>(tables_.size()); }

 private:
  // A BSP table's round being collected: the sum over the pushes so far
  // of each row's gradient times its worker's samples, rows in the order
  // they first came.
  struct Round {
    absl::flat_hash_map<uint64_t, int64_t> index;  // id -> its row in `sum`
    std::vector<uint64_t> ids;
    std::vector<float> sum;
    int64_t samples = 0;
  };
  // Every worker takes part in its clocks.
  struct Table : StandbyPart {
    Table(TableConfig config, uint64_t num_ids, int workers, int home, Consistency consistency)
        : StandbyPart(std::vector<bool>(workers, true)),
          home(home),
          num_ids(num_ids),
          width(config.width),
          state_floats(config.optimizer.StateFloats(config.width)),
          consistency(consistency),
          rows(std::move(config)) {}
    const int home;          // the server whose rows these are
    const uint64_t num_ids;  // 0: any id
    const int width;
    const int state_floats;         // a row's optimizer state
    const Consistency consistency;  // the tables' (BSP, SSP or ASP)
    SparseTable rows ABSL_GUARDED_BY(mu);
    Round round ABSL_GUARDED_BY(mu);                   // BSP only
    int64_t checkpoint_tried ABSL_GUARDED_BY(mu) = 0;  // the newest clock written or tried
    int64_t rows_pulled ABSL_GUARDED_BY(mu) = 0;
    int64_t rows_pushed ABSL_GUARDED_BY(mu) = 0;
    int64_t refused ABSL_GUARDED_BY(mu) = 0;
    int64_t nonfinite_skipped ABSL_GUARDED_BY(mu) = 0;  // pushes the finiteness rule skipped
    bool adopted ABSL_GUARDED_BY(mu) = false;           // served since promoted from a copy
    // What Status and CheckpointClock read, under a lock of its own, so
    // that neither waits while `mu` is held for long (a checkpoint being
    // written): the table's status as of its last change, and the clocks
    // of its checkpoint files.
    mutable absl::Mutex status_mu ABSL_ACQUIRED_AFTER(mu);
    TableStatus published ABSL_GUARDED_BY(status_mu);
    std::set<int64_t> checkpoints ABSL_GUARDED_BY(status_mu);

    // Copies the table's status to what Status reads: after every change.
    void Publish() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
    void Promoted() override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      round = Round();
      adopted = true;
    }
    void Joined() override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { adopted = false; }
    void Touched() override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { Publish(); }
  };

  // `home`'s part of the table named `name` for `worker`'s request, or
  // NOT_FOUND or INVALID_ARGUMENT (an unknown worker, a home not held
  // here), counted.
  absl::StatusOr<Table*> Find(int worker, absl::string_view name, int home);
  // `home`'s part of `name` (null: not held here).
  Table* Part(absl::string_view name, int home) const;
  // This server's own part of each table, in the job's order.
  std::vector<Table*> OwnParts() const;
  // The part of a pull that passes Pull's checks (refusals counted).
  absl::StatusOr<Table*> CheckedPull(int worker, absl::string_view name, int home,
                                     absl::Span<const uint64_t> ids);
  // UNAVAILABLE unless the part is served here (not a standby copy).
  static absl::Status CheckServing(const Table& table) ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu);
  // A served part changed: its standby is sent the change (`step`: an
  // update of `ids` by `grads`; else the applied clocks only), or, when
  // the update `failed` here (the spill file), the whole state.
  void Ship(Table& table, bool step, absl::Span<const uint64_t> ids, absl::Span<const float> grads,
            bool failed = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu);
  // A promoted part makes the rows of `ids` no pull made here.
  static absl::Status MakeMissing(Table& table, absl::Span<const uint64_t> ids)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu);
  // A standby copy replays its primary's change of the next version.
  static absl::Status Replay(Table& table, const TableUpdate& update)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu);
  // A standby copy takes a whole state.
  static absl::Status TakeFull(Table& table, const TableUpdate& update)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu);
  // INVALID_ARGUMENT for a change that does not fit `table`.
  absl::Status CheckUpdate(const Table& table, const TableUpdate& update) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu);
  // The whole state of `table`'s rows for which `keep(id)` (null: every
  // row), as a full update.
  static absl::StatusOr<TableUpdate> WholeState(Table& table,
                                                const std::function<bool(uint64_t)>& keep)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu);
  // An adopted part's rows: `held`'s, the update count their most.
  absl::Status PutRows(Table& table, const std::vector<TableUpdate>& held, int64_t clock)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu);
  // A restore's or an adoption's start of `generation` at `clock` for a
  // part whose rows are in place.
  void StartGeneration(Table& table, int64_t generation, int64_t clock)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu);
  // Restores one part (Restore).
  absl::Status RestorePart(Table& table, int64_t generation, int64_t clock,
                           const std::vector<int>& servers) ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu);
  // This server's rows of `table` from the checkpoint of `clock`: its own
  // file, or under a changed placement those of `servers`' files it holds.
  absl::Status ReadRows(Table& table, int64_t clock, const std::vector<int>& servers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu);
  // FAILED_PRECONDITION (older: the cluster rolled back) or UNAVAILABLE
  // (newer: not restored yet) unless `generation` is the table's.
  static absl::Status CheckGeneration(const Table& table, int64_t generation)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu);
  // OUT_OF_RANGE or INVALID_ARGUMENT for the first id this server may not
  // serve from `table`.
  absl::Status CheckIds(const Table& table, absl::Span<const uint64_t> ids) const;
  // Counts a refusal of `table`'s request and returns `st`.
  absl::Status Refuse(Table& table, absl::Status st);
  // BSP: adds a checked push to the round, and applies the round when it
  // is complete.
  void Collect(Table& table, int worker, int num_samples, absl::Span<const uint64_t> ids,
               absl::Span<const float> grads) ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu);
  // BSP: applies the complete round as one update, opens the next.
  void CloseRound(Table& table) ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu);
  // The table's clock moved: expiry, and its checkpoint when one is due.
  void Advanced(Table& table) ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu);
  // Writes the part's checkpoint of `clock` (its own part's file).
  void WriteCheckpoint(Table& table, int64_t clock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu);

  const int server_;
  const int servers_;
  const Placement placement_;
  const int workers_;
  const int standby_copies_;
  const int64_t total_clocks_;      // the job's
  const Consistency consistency_;   // the tables' (BSP, SSP or ASP)
  std::vector<std::string> order_;  // the job's
  // By name, then by home server (HeldHomes: this server's own part, and
  // with standby copies the standby copy it keeps).
  std::map<std::string, std::map<int, std::unique_ptr<Table>>, std::less<>> tables_;
  std::atomic<TableSink*> sink_{nullptr};
  StandbyParts standby_;  // over tables_' parts
  std::atomic<int64_t> refused_{0};
  NonfiniteRule nonfinite_;
  std::string checkpoint_dir_;
  const CheckpointSchedule* schedule_ = nullptr;  // null: no checkpoints
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_SPARSE_TABLES_H_
