// psctl checkpoint, drain, stop, set-consistency and drain-server: an operator's
// requests to the scheduler, and waiting until a checkpoint asked for is
// complete. Output goes to stdout, failures to stderr; each function
// returns psctl's exit code (0 done, 1 failed, 2 bad arguments).
#ifndef PSTRAIN_TOOLS_PSCTL_CONTROL_H_
#define PSTRAIN_TOOLS_PSCTL_CONTROL_H_

#include <cstdint>
#include <optional>
#include <string>

#include "proto/cluster.pb.h"
#include "tools/psctl_rpc.h"

namespace pstrain {

struct ControlOptions {
  bool json = false;  // print {"action": ..., "clock": ...}
  bool wait = false;  // checkpoint, drain: wait until the manifest names the checkpoint
  int wait_s = 300;   // how long to wait
};

// Waits up to `wait_s` seconds until the manifest names `clock` (and, when
// `drain`, the job ended: a scheduler gone UNAVAILABLE counts as ended).
// 1 when the job was aborted, a call fails or the time runs out.
int WaitForCheckpoint(const Endpoint& scheduler, int64_t clock, bool drain, int wait_s);

// psctl checkpoint|drain|stop: asks for `action` and prints the clock it
// takes effect at; with options.wait (not for STOP), WaitForCheckpoint.
int Control(const Endpoint& scheduler, ControlAction action, const ControlOptions& options);

// psctl drain-server N: server `server` (a decimal id; 2 when it is not
// one) moves its chunks to the others at a checkpoint the scheduler asks
// for, then exits FINISHED. Prints the switch clock; with options.wait,
// waits until the move ended: 0 switched, 1 abandoned (its reason
// printed). 2 when the scheduler refuses the drain (its reason printed:
// the last server, a move under way, a budget broken, ...).
int DrainServer(const Endpoint& scheduler, const std::string& server,
                const ControlOptions& options);

// psctl set-consistency --mode=bsp|ssp|asp [--staleness=N]: the running
// job's consistency from the clock the scheduler answers. 2 when `mode` is
// not a mode, or `staleness` is given without ssp (or ssp without it).
int SetConsistency(const Endpoint& scheduler, const std::string& mode, std::optional<int> staleness,
                   bool json);

}  // namespace pstrain

#endif  // PSTRAIN_TOOLS_PSCTL_CONTROL_H_
