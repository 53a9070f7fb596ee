// The scheduler's state file, STATE_DIR/scheduler.state: a text-format
// pstrain.SchedulerState (proto/scheduler_state.proto) that a scheduler started
// again on the same --state_dir takes the job over from. Written through a
// temporary file, fsynced and renamed (the folder fsynced too), so a crash
// leaves the old state or the new one.
#ifndef PSTRAIN_SCHEDULER_STATE_FILE_H_
#define PSTRAIN_SCHEDULER_STATE_FILE_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/scheduler_state.pb.h"

namespace pstrain {

std::string SchedulerStatePath(const std::string& state_dir);

// The state in `state_dir`; nullopt when there is none. INVALID_ARGUMENT
// naming the file for one that does not parse or is not a state file.
absl::StatusOr<std::optional<SchedulerState>> ReadSchedulerState(const std::string& state_dir);

// Writes `state` (creating `state_dir` if needed).
absl::Status WriteSchedulerState(const std::string& state_dir, const SchedulerState& state);

// STATE_DIR/scheduler.lock, held (flock, exclusive) for the life of the
// scheduler that owns the state dir: one scheduler a job. The kernel drops
// the lock when its process ends, however it ends, so a scheduler started
// again after a crash takes it at once.
class StateDirLock {
 public:
  // Takes the lock (creating `state_dir` if needed). FAILED_PRECONDITION
  // naming the holder (its pid and address) when another process holds it.
  static absl::StatusOr<std::unique_ptr<StateDirLock>> Take(const std::string& state_dir);
  ~StateDirLock();
  StateDirLock(const StateDirLock&) = delete;
  StateDirLock& operator=(const StateDirLock&) = delete;

  // Writes who holds the lock into the file: this process' pid, and the
  // address it serves on once known (empty before).
  void Describe(const std::string& address);

 private:
  explicit StateDirLock(int fd) : fd_(fd) {}
  const int fd_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_STATE_FILE_H_
