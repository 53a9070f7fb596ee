// A server's checkpoints in the safetensors layout: an 8-byte little-endian
// header length, a JSON header naming each tensor's dtype, shape and byte
// range, then the raw little-endian data. One file per checkpointed clock,
// DIR/server-<id>-clock-<c>.safetensors, holding for every chunk of the
// server its fp32 weights ("<param>[<begin>:<end>]") and optimizer state
// ("<param>[<begin>:<end>]/state"); "__metadata__" holds the clock, the
// server, the optimizer and each chunk's optimizer step count. The file is
// written as DIR/...safetensors.tmp, fsynced and renamed once every chunk is
// in, and then DIR/server-<id>.latest (also renamed into place) names it.
#ifndef PSTRAIN_SERVER_CHECKPOINT_H_
#define PSTRAIN_SERVER_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace pstrain {

class CheckpointWriter {
 public:
  struct Chunk {
    int32_t id = 0;
    std::string name;  // "<param>[<begin>:<end>]"
    int64_t weight_floats = 0;
    int64_t state_floats = 0;
  };

  CheckpointWriter(std::string dir, int server_id, std::string optimizer,
                   std::vector<Chunk> chunks);
  ~CheckpointWriter();

  // Chunk `chunk`'s weights, optimizer state and step count as of `clock`.
  // Thread-safe; chunks arrive in any order.
  absl::Status Write(int64_t clock, int32_t chunk, const float* weights, const float* state,
                     int64_t steps);

  const std::string& dir() const { return dir_; }

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
  std::vector<Chunk> chunks_;
  std::map<int32_t, size_t> index_;  // chunk id -> position in chunks_
  std::vector<int64_t> offsets_;     // data offset of each chunk's weights
  int64_t data_bytes_ = 0;
  int64_t header_room_ = 0;  // bytes reserved for the header (padded)

  absl::Mutex mu_;
  std::map<int64_t, Open> open_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_CHECKPOINT_H_
