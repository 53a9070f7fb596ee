// Where a server's checkpoint files live and what they are called, shared
// by the server that writes them (server/checkpoint.h) and the scheduler
// that names complete sets of them (scheduler/manifest.h).
#ifndef PSTRAIN_COMMON_CHECKPOINT_NAMES_H_
#define PSTRAIN_COMMON_CHECKPOINT_NAMES_H_

#include <cstdint>
#include <string>
#include <vector>

namespace pstrain {

// DIR/server-<id>-clock-<clock>.safetensors
std::string CheckpointPath(const std::string& dir, int server_id, int64_t clock);
// DIR/server-<id>-clock-<clock>.table-<table>.safetensors: server
// `server_id`'s part of sparse table `table` (server/table_checkpoint.h).
std::string TableCheckpointPath(const std::string& dir, int server_id, int64_t clock,
                                const std::string& table);
// The clocks of server `server_id`'s complete files of `table`, ascending.
std::vector<int64_t> TableCheckpointClocks(const std::string& dir, int server_id,
                                           const std::string& table);
// The servers with a complete checkpoint file of clock `clock` in `dir`,
// ascending.
std::vector<int> CheckpointServers(const std::string& dir, int64_t clock);
// DIR/job.pbtxt: the job the checkpoints are of, complete (its spec,
// overrides and defaults), as the scheduler wrote it when the job started.
std::string CheckpointJobPath(const std::string& dir);
// The clocks of server `server_id`'s complete checkpoint files in `dir`,
// ascending (none when `dir` does not exist).
std::vector<int64_t> CheckpointClocks(const std::string& dir, int server_id);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_CHECKPOINT_NAMES_H_
