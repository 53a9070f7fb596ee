// Small helpers for absl::Status propagation (Debian's Abseil 20220623 has no
// status macros of its own).
#ifndef PSTRAIN_COMMON_STATUS_MACROS_H_
#define PSTRAIN_COMMON_STATUS_MACROS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

#define PS_CONCAT_INNER_(a, b) a##b
#define PS_CONCAT_(a, b) PS_CONCAT_INNER_(a, b)

// Returns from the current function if `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                \
  do {                                       \
    ::absl::Status ps_status_ = (expr);      \
    if (!ps_status_.ok()) return ps_status_; \
  } while (0)

// `lhs = value of expr` (an absl::StatusOr<T>), or returns its error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(PS_CONCAT_(ps_statusor_, __LINE__), lhs, expr)

#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return tmp.status();          \
  lhs = std::move(tmp).value()

namespace pstrain {

// `st` with its message prefixed by `what` ("pull: ", a file's name and
// ": "), its code and payloads kept (common/daemon_status.h); OK stays OK.
inline absl::Status Prefixed(absl::string_view what, const absl::Status& st) {
  if (st.ok()) return st;
  absl::Status out(st.code(), absl::StrCat(what, st.message()));
  st.ForEachPayload(
      [&out](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_STATUS_MACROS_H_
