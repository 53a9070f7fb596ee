// A server's checkpoints in the safetensors layout: an 8-byte little-endian
// header length, a JSON header naming each tensor's dtype, shape and byte
// range, then the raw little-endian data. One file per checkpointed clock,
// DIR/server-<id>-clock-<c>.safetensors, holding for every chunk of the
// server its fp32 weights ("<param>[<begin>:<end>]") and optimizer state
// ("<param>[<begin>:<end>]/state"); "__metadata__" holds the clock, the
// server, the optimizer and each chunk's optimizer step count. The file is
// written as DIR/...safetensors.tmp, fsynced and renamed once every chunk is
// in. The scheduler names complete sets (every server's file of one clock)
// in DIR/manifest.json (scheduler/manifest.h).
#ifndef PSTRAIN_SERVER_CHECKPOINT_H_
#define PSTRAIN_SERVER_CHECKPOINT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/checkpoint_names.h"

namespace pstrain {

// INTERNAL naming `path`, what failed and errno's reason.
absl::Status FileError(const std::string& what, const std::string& path);
// Writes all `bytes` of `data` at offset `at` of fd (retrying short writes
// and EINTR); FileError on failure.
absl::Status WriteFileAt(int fd, const void* data, int64_t bytes, int64_t at,
                         const std::string& path);

class CheckpointWriter {
 public:
  struct Chunk {
    int32_t id = 0;
    std::string name;  // "<param>[<begin>:<end>]"
    int64_t weight_floats = 0;
    int64_t state_floats = 0;
  };

  // `tables`: the job's sparse tables, whose files of this server (written
  // by server/table_checkpoint.h) Rollback and Prune delete with the
  // chunks'.
  CheckpointWriter(std::string dir, int server_id, std::string optimizer,
                   std::vector<Chunk> chunks, std::vector<std::string> tables = {});
  ~CheckpointWriter();

  // Chunk `chunk`'s weights, optimizer state and step count as of `clock`.
  // Thread-safe; chunks arrive in any order.
  absl::Status Write(int64_t clock, int32_t chunk, const float* weights, const float* state,
                     int64_t steps);

  const std::string& dir() const { return dir_; }
  // The clock of the newest file completed (or restored from), 0 if none.
  int64_t latest() const { return latest_; }

  // After a rollback to `clock`: files not yet complete are dropped, and
  // this server's files of later clocks deleted, its chunks' and its
  // tables' (they hold a history that is being replayed). Call when no
  // Write is under way.
  void Rollback(int64_t clock);
  // Deletes this server's files of clocks before `clock`, its chunks' and
  // its tables' (a newer complete set exists).
  void Prune(int64_t clock);

 private:
  struct Open {
    int fd = -1;
    std::string tmp, path;
    int64_t data_start = 0;
    size_t remaining = 0;
    std::map<int32_t, int64_t> steps;
  };
  absl::Status Finish(int64_t clock, Open& open);
  // The header of clock `clock`'s file (steps unknown yet: written last).
  std::string Header(int64_t clock, const std::map<int32_t, int64_t>& steps) const;

  const std::string dir_;
  const int server_id_;
  const std::string optimizer_;
  // Deletes this server's files, chunks' and tables', of the clocks
  // `drop(clock)` selects.
  void Delete(const std::function<bool(int64_t)>& drop) const;

  std::vector<Chunk> chunks_;
  const std::vector<std::string> tables_;
  std::map<int32_t, size_t> index_;  // chunk id -> position in chunks_
  std::vector<int64_t> offsets_;     // data offset of each chunk's weights
  int64_t data_bytes_ = 0;
  int64_t header_room_ = 0;  // bytes reserved for the header (padded)

  absl::Mutex mu_;
  std::map<int64_t, Open> open_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> latest_{0};
};

// A checkpoint file opened for reading, its header parsed and checked
// (every tensor F32 or I64 with a byte range inside the file that matches
// its shape). Any malformed file gives INVALID_ARGUMENT naming it.
class CheckpointFile {
 public:
  static absl::StatusOr<CheckpointFile> Open(const std::string& path);

  int64_t clock() const { return clock_; }
  int server() const { return server_; }
  const std::string& optimizer() const { return optimizer_; }
  const std::string& path() const { return path_; }
  // The chunks the file holds ("<param>[<begin>:<end>]"), ascending.
  std::vector<std::string> chunk_names() const;
  // Chunk `name`'s optimizer step count.
  absl::StatusOr<int64_t> Steps(const std::string& name) const;
  // Reads tensor `name`, which must hold exactly `n` floats, into `out`.
  absl::Status Read(const std::string& name, float* out, int64_t n) const;
  // Reads I64 tensor `name`, which must hold exactly `n` values, into `out`
  // (their bits: ids as uint64).
  absl::Status ReadIds(const std::string& name, uint64_t* out, int64_t n) const;
  // Reads values [first, first + n) of F32 tensor `name` into `out`.
  absl::Status ReadPart(const std::string& name, int64_t first, float* out, int64_t n) const;
  // The number of values tensor `name` holds.
  absl::StatusOr<int64_t> Count(const std::string& name) const;
  // A whole number of __metadata__ (a string of digits there).
  absl::StatusOr<int64_t> Number(const std::string& key) const;
  // A string of __metadata__ ("" when absent).
  std::string Text(const std::string& key) const;

  // Where a tensor's data lies in the file.
  struct Tensor {
    int64_t begin = 0;  // byte offsets from the file's start
    int64_t floats = 0;  // values (floats or I64s)
    bool ids = false;    // I64
  };

 private:
  std::string path_;
  std::shared_ptr<int> fd_;  // closes on the last copy's destruction
  int64_t clock_ = 0;
  int server_ = 0;
  std::string optimizer_;
  std::map<std::string, int64_t> steps_;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, Tensor> tensors_;
  // Reads tensor `name` of n values of `dtype_ids` kind into out.
  // (all of it unless `part`).
  absl::Status ReadRaw(const std::string& name, bool dtype_ids, void* out, int64_t first,
                       int64_t n, bool part) const;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_CHECKPOINT_H_
