#include "server/move_wait.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/daemon.h"

namespace pstrain {

absl::Status AwaitMove(const SchedulerClient& client, const std::function<bool()>& done) {
  while (!ShutdownRequested()) {
    std::string message;
    const JobState state = client.job_state(&message);
    if (state == DONE || state == ABORTED) {
      return absl::AbortedError(absl::StrCat("the job ended before the move switched: ", message));
    }
    // Asked before the leave: the answer that ends the wait (a newer
    // generation) says whether the server must leave too.
    const bool finished = done();
    if (const std::string why = client.leave(); !why.empty()) {
      return absl::FailedPreconditionError(why);
    }
    if (finished) return absl::OkStatus();
    absl::SleepFor(absl::Milliseconds(5));
  }
  return absl::CancelledError("interrupted");
}

}  // namespace pstrain
