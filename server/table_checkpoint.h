// A sparse table's part on one server in a checkpoint: one safetensors
// file a table and clock (common/checkpoint_names.h's TableCheckpointPath)
// holding "ids" (I64 [n]: the ids' bits, so ids of 2^63 and above read as
// negative int64), "rows" (F32 [n, width + state]: each row's weights,
// then its optimizer state) and "touched" (I64 [n]: the clock each row was
// last touched at, for expiry), in the same order, and with admission
// "seen" (I64: the admission filter's one-byte counters, 8 to a value);
// "__metadata__" holds the clock, the server, the table's name, width and
// update count (the optimizer's t). Written as PATH.tmp, fsynced and
// renamed.
#ifndef PSTRAIN_SERVER_TABLE_CHECKPOINT_H_
#define PSTRAIN_SERVER_TABLE_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/sparse_table.h"

namespace pstrain {

// Writes every row of `table` (in memory or spilled) as of `clock`.
absl::Status WriteTableCheckpoint(const std::string& path, int server, int64_t clock,
                                  SparseTable& table);
// Replaces `table`'s rows, their touched clocks, the admission counts, the
// update count and the clock with those of the file, which must be server
// `server`'s of `clock`. INVALID_ARGUMENT, nothing changed, when the file
// is malformed, of another server, clock, table, width or optimizer, or
// names an id twice; NOT_FOUND when it does not exist; INTERNAL when the
// table's spill file fails (the table then holds part of the file).
absl::Status ReadTableCheckpoint(const std::string& path, int server, int64_t clock,
                                 SparseTable* table);

// One server's file of a table: its path (TableCheckpointPath).
struct TablePart {
  int server = 0;
  std::string path;
};
// The same over several servers' files of `clock` (a table restored under
// another placement: each row to the server its bucket names now): the
// rows of every file for which `keep` (null: every row) says yes. The
// files must agree on the update count (every server takes every push);
// INVALID_ARGUMENT, nothing changed, for one that does not, an id in two
// files, or more than one file of a table with admission (its counts are
// not kept by row).
absl::Status ReadTableCheckpoints(const std::vector<TablePart>& parts, int64_t clock,
                                  SparseTable* table, const std::function<bool(uint64_t id)>& keep);

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_TABLE_CHECKPOINT_H_
