// One embedding table's rows on one server: rows keyed by 64-bit ids,
// created on first touch from the table's initializer, each with its own
// optimizer state, updated lazily -- a push moves only the rows it touches
// (torch.optim.SparseAdam's and sparse Adagrad's semantics, so a job can be
// checked against a PyTorch process with nn.EmbeddingBag(sparse=True)).
// The logic only: no gRPC, no files. A server's tables are
// server/sparse_tables.h; the job spec declares them (JobSpec.tables).
#ifndef PSTRAIN_SERVER_SPARSE_TABLE_H_
#define PSTRAIN_SERVER_SPARSE_TABLE_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/rows.h"

namespace pstrain {

// A row's optimizer, with PyTorch's names, defaults and formulas for sparse
// gradients (t: the table's update count, this one included; g a row's
// gradient, summed over the batch's uses of the row):
//   SGD:      w -= lr * g
//   ADAGRAD:  s += g^2;  w -= lr / (1 + (t - 1) * lr_decay) * g / (sqrt(s) + eps)
//   ADAM:     m += (g - m)(1 - beta1);  v += (g^2 - v)(1 - beta2);
//             w -= lr * sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + eps)
// (torch.optim.SparseAdam: t counts the table's updates, rows touched or
// not, while m and v move only for touched rows).
struct RowOptimizer {
  enum class Type { kSgd, kAdagrad, kAdam };
  Type type = Type::kSgd;
  // Doubles, as Python's: each is rounded to float where PyTorch rounds it.
  double lr = 0.01;
  double eps = 1e-8;  // Adam's default; Adagrad's is 1e-10
  double beta1 = 0.9, beta2 = 0.999;
  double lr_decay = 0;
  double initial_accumulator = 0;  // Adagrad's s at creation
  // Floats of state a row of `width` keeps beside its weights.
  int StateFloats(int width) const;
  // The state a new row starts with (StateFloats(width) floats).
  void InitState(int width, float* state) const;
  // One update of a row at table update t >= 1.
  void Update(int64_t t, int width, const float* g, float* w, float* state) const;
};

struct TableConfig {
  std::string name;
  int width = 0;          // floats a row
  float init_scale = 0;   // rows start uniform in [-init_scale, init_scale]
  uint64_t seed = 0;      // with the name and the id, fixes a row's start
  RowOptimizer optimizer;
  // The most bytes the table keeps in memory: its admission filter, and its
  // rows in memory -- weights, optimizer state and kRowBookkeepingBytes
  // each (common/job_sizes.h). The other rows wait in a file in `spill_dir`
  // (made at the first spill, removed at once: it goes with the process)
  // and come back when touched. 0: no bound. At least one row is always
  // kept.
  int64_t resident_bytes = 0;
  std::string spill_dir;  // empty: $TMPDIR, else /tmp
  // Admission: an id gets a row in the update that sees it for the
  // admit_after-th time (counted in a SeenCounts of kAdmissionFilterBytes
  // counters, common/job_sizes.h); until
  // then it pulls as zeros and its gradients are dropped. <= 1: every id at
  // first touch.
  int admit_after = 0;
  // Expiry: a row not touched (pulled or pushed) in this many clocks after
  // the one it was last touched in is dropped (touched in clock c, it goes
  // at Advance(c + expire_after + 1) at the earliest). 0: never.
  int64_t expire_after = 0;
};

// Counts of sightings of ids in a fixed array of one-byte counters: a
// counting Bloom filter with 3 hashes and conservative update (an id's
// count is the least of its counters, and only the least are raised), so
// a count is never below the true one and may be above it when ids
// collide. Saturates at 255.
class SeenCounts {
 public:
  explicit SeenCounts(int64_t counters) : counts_(static_cast<size_t>(counters), 0) {}
  // One more sighting of `id`; its count after it.
  int Add(uint64_t id);
  int64_t bytes() const { return static_cast<int64_t>(counts_.size()); }
  // Every count back to 0 (a restore), in place.
  void Clear() { std::fill(counts_.begin(), counts_.end(), 0); }
  // The counters (bytes() of them), for checkpoints.
  const uint8_t* data() const { return counts_.data(); }
  uint8_t* mutable_data() { return counts_.data(); }

 private:
  std::vector<uint8_t> counts_;
};

// Where a table's rows are, for Status.
struct TableRows {
  int64_t resident = 0;  // in memory
  int64_t on_disk = 0;   // in the spill file
  int64_t spilled = 0;   // row writes to the file so far
  int64_t loaded = 0;    // row reads from it so far
  int64_t created = 0;   // rows made (first touch or admission)
  int64_t expired = 0;   // rows dropped by expiry
  int64_t dropped = 0;   // gradient rows of ids with no row (not admitted, expired)
};

// Not thread-safe: one caller at a time (a server locks each table).
class SparseTable {
 public:
  explicit SparseTable(TableConfig config);

  ~SparseTable();
  SparseTable(const SparseTable&) = delete;
  SparseTable& operator=(const SparseTable&) = delete;

  const TableConfig& config() const { return config_; }
  int width() const { return config_.width; }
  int64_t num_rows() const { return static_cast<int64_t>(index_.size()); }
  // Bytes a row takes (weights and optimizer state).
  int64_t row_bytes() const { return stride_ * 4; }
  // Bytes the table holds in memory: its admission filter, and its rows in
  // memory with their bookkeeping (what resident_bytes bounds).
  int64_t memory_bytes() const;
  TableRows rows() const;
  // Updates applied so far (Push calls that succeeded).
  int64_t updates() const { return updates_; }
  int64_t clock() const { return clock_; }

  // The table's clock is now `clock`: rows touched from now on are touched
  // at it, and with expiry, rows untouched for expire_after clocks are
  // dropped (looked for every max(1, expire_after / 4) clocks).
  void Advance(int64_t clock);

  // Writes the rows of `ids` to out (ids.size() x width floats, in order;
  // an id may repeat), creating the missing ones (with admission, an id
  // not admitted yet reads as zeros and makes nothing). INTERNAL when the
  // spill file cannot be written or read (what was done stays done).
  absl::Status Pull(absl::Span<const uint64_t> ids, float* out);
  // One update of the table: `ids` distinct (CoalesceRows), `grads`
  // ids.size() x width floats. Refused, nothing applied: INVALID_ARGUMENT for
  // a wrong size or a repeated id, FAILED_PRECONDITION for an id no pull
  // created (with admission or expiry such an id is a sighting: admitted,
  // its row is made and updated; else its gradient is dropped and
  // counted); INTERNAL as Pull's (then some rows may be updated).
  absl::Status Push(absl::Span<const uint64_t> ids, absl::Span<const float> grads);
  // What Push would refuse, without applying anything.
  absl::Status CheckPush(absl::Span<const uint64_t> ids, absl::Span<const float> grads) const;
  // Whether `id` has a row (in memory or in the spill file).
  bool Has(uint64_t id) const { return index_.contains(id); }
  // The weights of `id`'s row (width floats) when it is in memory, else
  // null.
  const float* Row(uint64_t id) const;

  // Calls f(id, row, touched) for every row, row being its weights then
  // its state (row_bytes()), touched the clock it was last touched at, in
  // no set order; rows in the spill file are read back into a scratch
  // buffer. Stops at f's first error.
  absl::Status ForEachRow(
      const std::function<absl::Status(uint64_t id, const float* row, int64_t touched)>& f);
  // Forgets every row and every id's sightings, and sets the update count
  // and clock (a restore).
  void Reset(int64_t updates, int64_t clock);
  // Puts `id`'s row (weights then state, as ForEachRow gives it) in the
  // table as it is, last touched at `touched`: a restore. INVALID_ARGUMENT
  // when the id has a row.
  absl::Status Put(uint64_t id, const float* row, int64_t touched);
  // The admission counts; null without admission.
  SeenCounts* seen() { return seen_.get(); }
  const SeenCounts* seen() const { return seen_.get(); }

 private:
  // Where a row is, and the clock it was last touched at.
  struct Entry {
    int64_t where;  // its cell in memory (>= 0), or OnDisk(k)
    int64_t touched;
  };
  // Entry::where for a row in the spill file's cell k.
  static int64_t OnDisk(int64_t k) { return -1 - k; }
  // Whether a push may name ids with no row (admission or expiry).
  bool Lenient() const { return seen_ != nullptr || config_.expire_after > 0; }
  // Push's checks (sizes, repeats, every row made unless Lenient).
  absl::Status Check(absl::Span<const uint64_t> ids, absl::Span<const float> grads) const;
  // `id`'s row in memory (made, or read back from the file, first; another
  // row may go to the file for it): its weights, then its state.
  absl::StatusOr<float*> Resident(uint64_t id);
  // A free cell in memory: one a dropped row left, a new one while under
  // the bound, else one whose row goes to the file (the clock algorithm: a
  // row touched since the hand last passed gets another round).
  absl::StatusOr<int64_t> FreeCell();
  // Drops the rows untouched for expire_after clocks.
  void Expire();
  absl::Status OpenSpill();
  float* Cell(int64_t cell) {
    return blocks_[cell / cells_per_block_].get() + (cell % cells_per_block_) * stride_;
  }
  const float* Cell(int64_t cell) const {
    return blocks_[cell / cells_per_block_].get() + (cell % cells_per_block_) * stride_;
  }

  const TableConfig config_;
  const uint64_t init_key_;  // TableInitKey of the job's seed and the name
  const int64_t stride_;    // floats a row: weights, then state
  const int64_t capacity_;  // cells in memory at most
  // The cells in memory, in blocks of cells_per_block_ (about 1 MiB, never
  // past capacity_): a block is allocated when the cells before it are all
  // used and never moved, so the rows' memory grows a block at a time,
  // never copied, never past the budget.
  const int64_t cells_per_block_;
  std::vector<std::unique_ptr<float[]>> blocks_;
  int64_t cells_allocated_ = 0;
  absl::flat_hash_map<uint64_t, Entry> index_;
  std::vector<uint64_t> cell_ids_;  // each cell's row
  std::vector<bool> touched_;       // since the hand passed
  std::vector<int64_t> free_cells_;  // cells in memory no row uses
  int64_t hand_ = 0;
  std::unique_ptr<SeenCounts> seen_;  // with admission
  int64_t clock_ = 0, next_sweep_ = 0;
  int spill_fd_ = -1;
  std::vector<int64_t> free_disk_;  // cells of the file no row uses
  int64_t disk_cells_ = 0;          // the file's size in rows
  int64_t spilled_ = 0, loaded_ = 0, created_ = 0, expired_ = 0, dropped_ = 0;
  int64_t updates_ = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_SPARSE_TABLE_H_
