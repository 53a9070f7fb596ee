// The tests' one polling loop, WaitForStatus, and the reads of a cluster's
// Status their predicates are made of. Every multi-process test that waits
// for the cluster to reach a state asks it through WaitForStatus.
#ifndef PSTRAIN_TESTS_WAIT_H_
#define PSTRAIN_TESTS_WAIT_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/time/time.h"
#include "proto/status.pb.h"

namespace pstrain {
namespace testing {

// Asks the scheduler at `scheduler` for its Status every `every` until
// `done(status)` holds (true) or `timeout` has passed (false). A Status
// that cannot be fetched is not done.
bool WaitForStatus(const std::string& scheduler,
                   const std::function<bool(const ClusterStatus&)>& done, absl::Duration timeout,
                   absl::Duration every = absl::Milliseconds(20));

// The slowest worker's clock in `status` (-1 when it lists no worker).
int64_t SlowestClock(const ClusterStatus& status);
// Worker `id`'s clock in `status` (-1 when it lists none).
int64_t WorkerClock(const ClusterStatus& status, int id);
// How many workers `status` lists at clock `clock` or later.
int WorkersAt(const ClusterStatus& status, int64_t clock);

// The 1-minute load average per core (/proc/loadavg; 1 when it cannot be
// read). A bound on how fast daemons react scales by max(1, this): every
// reaction waits for a core.
double LoadPerCore();

}  // namespace testing
}  // namespace pstrain

#endif  // PSTRAIN_TESTS_WAIT_H_
