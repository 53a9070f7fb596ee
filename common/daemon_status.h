// Which daemon a failed call went to, carried on the absl::Status itself (a
// payload), so that an error that crosses layers -- a client's retries, the
// clock loop, the C ABI -- still says whether the scheduler or a server
// failed: Python's SchedulerUnavailable and ServerUnavailable are told apart
// by it (pst_error_daemon), never by the message. Tagged once, where the
// call is made (the scheduler's client, the parameter and row clients);
// Prefixed (common/status_macros.h) keeps it.
#ifndef PSTRAIN_COMMON_DAEMON_STATUS_H_
#define PSTRAIN_COMMON_DAEMON_STATUS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/member.pb.h"

namespace pstrain {

// `st` tagged as an answer of (or a failure to reach) a daemon of `role`;
// OK, or already tagged (by the call nearer the daemon), it is returned as
// it is.
absl::Status FromDaemon(Role role, absl::Status st);

template <typename T>
absl::StatusOr<T> FromDaemon(Role role, absl::StatusOr<T> v) {
  if (v.ok()) return v;
  return FromDaemon(role, std::move(v).status());
}

// The role `st` was tagged with; ROLE_UNSPECIFIED when untagged (OK, or an
// error of the caller's own).
Role DaemonOf(const absl::Status& st);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_DAEMON_STATUS_H_
