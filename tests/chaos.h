// The chaos run, shared by tests/chaos_test (bounded, in CI) and
// bench/chaos (as long as asked): a BSP job with checkpoints on a local
// cluster under deploy/local_cluster.sh --supervise, and faults at random
// times -- SIGKILL, or SIGSTOP then SIGCONT, of a random worker, server or
// the scheduler -- one at a time, each once the job has recovered from the
// last. At the end the job must be DONE and its weights bit-identical to an
// undisturbed run of the same job: BSP plus rollbacks to consistent
// checkpoints plus a scheduler that takes the job over make this exact.
#ifndef PSTRAIN_TESTS_CHAOS_H_
#define PSTRAIN_TESTS_CHAOS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pstrain {
namespace testing {

struct ChaosOptions {
  uint32_t seed = 1;
  int64_t clocks = 2000;  // the job's clocks
  int servers = 2;
  int workers = 2;
  int slowdown_ms = 15;  // each worker's --straggler=fixed:MS (a clock's length)
  // Clocks after a recovery before the next fault (uniform in between).
  // Counted in clocks, not seconds, so that how many faults a job of
  // `clocks` clocks meets does not depend on how fast the machine runs it:
  // at least (clocks - 20 - quiet_tail) / (max_gap + a recovery's clocks).
  int64_t min_gap = 80;
  int64_t max_gap = 200;
  absl::Duration max_stop = absl::Seconds(4);  // SIGSTOP lasts 0.3 s .. this
  int heartbeat_timeout_ms = 2000;
  // Stop injecting once the job is this close to its end (a fault during
  // the final evaluation has nothing left to recover into).
  int64_t quiet_tail = 150;
  // Standby copies (--standby_copies=1): a server's death promotes its standby
  // instead of rolling back; the next fault waits until every server's
  // standby copies are filled again.
  bool standby = false;
  std::string dir;  // logs, checkpoints, weights (a fresh folder)
  // Where a run that is not bit-identical, or did not exit 0, is moved
  // whole (both runs' logs, checkpoints and weights: `keep_dir`/<dir's
  // name>), so that it outlives a test's temporary folder; empty: it stays
  // in `dir`.
  std::string keep_dir;
};

struct Fault {
  std::string kind;        // "kill" or "stop"
  std::string target;      // "scheduler", "server0", "worker1", ...
  int64_t clock = 0;       // the slowest worker's clock when it struck
  double stopped_s = 0;    // SIGSTOP to SIGCONT
  double recovery_s = -1;  // until the slowest clock moved past `clock` + 1 (-1: never)
};

struct ChaosReport {
  std::vector<Fault> faults;
  int exit_code = -1;          // local_cluster's (the scheduler's)
  bool bit_identical = false;  // final weights equal the undisturbed run's, byte for byte
  double undisturbed_s = 0, disturbed_s = 0;
  int restarts = 0;  // daemons local_cluster started again
  // From the scheduler's final Status: rollbacks to a checkpoint, and
  // standbys promoted (-1: no final Status).
  int rollbacks = -1;
  int64_t promotions = -1;
  // Of the rollbacks, those a replacement asked for (Rollback.redo: its
  // predecessor's push of a clock had reached some chunks and not others).
  int redo_rollbacks = 0;
  // A run not bit-identical: the largest |w - w_undisturbed| of worker 0's
  // final weights (-1: a run wrote none), and where its files are.
  double max_difference = 0;
  std::string kept;
  std::string json;  // the report as one JSON object
};

// Runs the undisturbed job, then the disturbed one; CHECKs nothing, says
// what happened. An error only when a run could not be started.
absl::StatusOr<ChaosReport> RunChaos(const ChaosOptions& options);

}  // namespace testing
}  // namespace pstrain

#endif  // PSTRAIN_TESTS_CHAOS_H_
