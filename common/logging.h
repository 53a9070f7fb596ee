// spdlog set-up: every line carries the daemon's role and id.
#ifndef PSTRAIN_COMMON_LOGGING_H_
#define PSTRAIN_COMMON_LOGGING_H_

#include <string>

#include "absl/strings/string_view.h"
#include "spdlog/spdlog.h"

#ifndef ABSL_USES_STD_STRING_VIEW
// Debian's Abseil has its own string_view; let spdlog print it (status
// messages are absl::string_view).
template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<fmt::string_view> {
  template <typename Context>
  auto format(absl::string_view s, Context& ctx) const {
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(s.data(), s.size()), ctx);
  }
};
#endif

namespace pstrain {

// Sets the default logger's pattern to "[time] [role id] [level] message".
// Call again once the id is known (id < 0 prints the role alone).
void SetLogIdentity(const std::string& role, int id);

// Sends every log line to standard error instead of standard output: for
// tools whose standard output is their result (the benchmarks' JSON).
void LogToStderr();

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_LOGGING_H_
