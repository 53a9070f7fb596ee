// psctl status and watch: the cluster's members as a table (or the
// ClusterStatus as JSON), one daemon's own Status, and the table
// refreshed in place with a progress bar. Output goes to stdout, failures
// to stderr; each function returns psctl's exit code.
#ifndef PSTRAIN_TOOLS_PSCTL_STATUS_H_
#define PSTRAIN_TOOLS_PSCTL_STATUS_H_

#include <string>

#include "absl/time/time.h"
#include "tools/psctl_rpc.h"

namespace pstrain {

// psctl status --scheduler: every member of the cluster; 0, or 1 when the
// call fails.
int StatusOfCluster(const Endpoint& scheduler, bool json);

// psctl status --target --role: one daemon's own Status; `role` is
// "server" or "worker" (else 2).
int StatusOfDaemon(const Endpoint& daemon, const std::string& role, bool json);

struct WatchOptions {
  bool json = false;        // one JSON object a line instead of the table
  absl::Duration interval;  // between refreshes
  int count = 0;            // refreshes before returning 0; 0: until the job ends
};

// psctl watch: the cluster status every `interval` until the job ends (0
// when DONE, 1 when ABORTED or a call fails) or `count` refreshes.
int Watch(const Endpoint& scheduler, const WatchOptions& options);

}  // namespace pstrain

#endif  // PSTRAIN_TOOLS_PSCTL_STATUS_H_
