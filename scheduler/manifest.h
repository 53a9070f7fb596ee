// DIR/manifest.json names the newest complete checkpoint set: every
// server's file of one clock (server/checkpoint.h). The scheduler writes it
// (through a temporary file, fsynced and renamed) once every server holding
// chunks reports that clock's file written, and reads it when a job starts
// on the directory:
//   {"format": "pstrain checkpoint manifest", "clock": 40, "servers": 2,
//    "files": ["server-0-clock-40.safetensors", "server-1-clock-40.safetensors"]}
#ifndef PSTRAIN_SCHEDULER_MANIFEST_H_
#define PSTRAIN_SCHEDULER_MANIFEST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"

namespace pstrain {

struct Manifest {
  int64_t clock = 0;
  int num_servers = 0;
  std::vector<std::string> files;
};

// The manifest in `dir`; nullopt when there is none. INVALID_ARGUMENT for
// a malformed one, NOT_FOUND when a file it names is missing.
absl::StatusOr<std::optional<Manifest>> ReadManifest(const std::string& dir);

// Names the files of `clock` of `servers` (ids) in a job of `num_servers`.
absl::Status WriteManifest(const std::string& dir, int64_t clock, int num_servers,
                           const std::vector<int>& servers);

// Writes the job into its checkpoint directory (DIR/job.pbtxt), so that
// the checkpoints say what they are of (psctl export reads it); again once
// the first worker declared an EXTERNAL model, for its parameters' names.
absl::Status WriteCheckpointJob(const JobSpec& job);

// The newest clock <= `at_most` of which every server of `servers` has a
// complete file in `dir`, and a file of every table of `tables`; 0 when
// none.
int64_t NewestCompleteSet(const std::string& dir, const std::vector<int>& servers, int64_t at_most,
                          const std::vector<std::string>& tables = {});

}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_MANIFEST_H_
