// Every server's checkpoint file of one clock (server/checkpoint.h), by the
// chunks they hold: a chunk is restored from whichever server's file of
// that clock has it, so that a checkpoint restores under any placement of
// the chunks (common/placement.h) -- one written before a server was added
// to the job or drained from it, too -- and psctl export reads it the
// same way.
#ifndef PSTRAIN_SERVER_CHECKPOINT_SET_H_
#define PSTRAIN_SERVER_CHECKPOINT_SET_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/checkpoint.h"

namespace pstrain {

class CheckpointSet {
 public:
  // The complete files DIR/server-*-clock-<clock>.safetensors, opened.
  // NOT_FOUND when there is none; INVALID_ARGUMENT for a malformed file
  // (CheckpointFile::Open's), or two that hold the same chunk.
  static absl::StatusOr<CheckpointSet> Open(const std::string& dir, int64_t clock);

  int64_t clock() const { return clock_; }
  // The file that holds chunk `name` ("<param>[<begin>:<end>]"); NOT_FOUND
  // naming the chunk, the clock and the directory when none does.
  absl::StatusOr<const CheckpointFile*> Holding(const std::string& name) const;
  // The servers whose files these are, ascending.
  std::vector<int> servers() const;

 private:
  std::string dir_;
  int64_t clock_ = 0;
  std::vector<CheckpointFile> files_;
  std::map<std::string, size_t> holding_;  // chunk name -> index in files_
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_CHECKPOINT_SET_H_
