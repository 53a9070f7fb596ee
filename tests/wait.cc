#include "tests/wait.h"

#include <algorithm>
#include <cstdio>
#include <thread>

#include "absl/time/clock.h"
#include "tests/cluster.h"

namespace pstrain {
namespace testing {

bool WaitForStatus(const std::string& scheduler,
                   const std::function<bool(const ClusterStatus&)>& done, absl::Duration timeout,
                   absl::Duration every) {
  for (const absl::Time until = absl::Now() + timeout; absl::Now() < until;
       absl::SleepFor(every)) {
    absl::StatusOr<ClusterStatus> st = SchedulerStatus(scheduler);
    if (st.ok() && done(*st)) return true;
  }
  return false;
}

int64_t SlowestClock(const ClusterStatus& status) {
  int64_t slowest = INT64_MAX;
  for (const MemberStatus& m : status.members()) {
    if (m.role() == WORKER) slowest = std::min(slowest, m.clock());
  }
  return slowest == INT64_MAX ? -1 : slowest;
}

int64_t WorkerClock(const ClusterStatus& status, int id) {
  for (const MemberStatus& m : status.members()) {
    if (m.role() == WORKER && m.id() == id) return m.clock();
  }
  return -1;
}

int WorkersAt(const ClusterStatus& status, int64_t clock) {
  int at = 0;
  for (const MemberStatus& m : status.members()) at += m.role() == WORKER && m.clock() >= clock;
  return at;
}

double LoadPerCore() {
  double load = 0;
  std::FILE* f = std::fopen("/proc/loadavg", "r");
  if (f == nullptr) return 1;
  const bool read = std::fscanf(f, "%lf", &load) == 1;
  std::fclose(f);
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return read ? load / cores : 1;
}

}  // namespace testing
}  // namespace pstrain
