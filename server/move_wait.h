// What a server that joined the running job (ps_server --join) waits for
// while the move that adds it goes on (scheduler/placement_moves.h), from
// its scheduler client's last heartbeat answer: the checkpoint of the
// switch clock named by the manifest, then the switch.
#ifndef PSTRAIN_SERVER_MOVE_WAIT_H_
#define PSTRAIN_SERVER_MOVE_WAIT_H_

#include <functional>

#include "absl/status/status.h"
#include "common/scheduler_client.h"

namespace pstrain {

// Polls `client` until `done` says yes. FAILED_PRECONDITION naming why
// when the scheduler says the server must leave (the move was abandoned:
// a heartbeat answer of the generation after a rollback says so too);
// ABORTED when the job ended first; CANCELLED on SIGINT or SIGTERM.
absl::Status AwaitMove(const SchedulerClient& client, const std::function<bool()>& done);

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_MOVE_WAIT_H_
