#include "common/daemon_status.h"

#include <string>

#include "absl/strings/cord.h"

namespace pstrain {
namespace {

constexpr char kDaemonUrl[] = "type.pstrain.dev/daemon";

}  // namespace

absl::Status FromDaemon(Role role, absl::Status st) {
  if (st.ok() || st.GetPayload(kDaemonUrl).has_value()) return st;
  st.SetPayload(kDaemonUrl, absl::Cord(Role_Name(role)));
  return st;
}

Role DaemonOf(const absl::Status& st) {
  const absl::optional<absl::Cord> payload = st.GetPayload(kDaemonUrl);
  Role role = ROLE_UNSPECIFIED;
  if (payload.has_value()) Role_Parse(std::string(*payload), &role);
  return role;
}

}  // namespace pstrain
