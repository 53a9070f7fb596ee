// A Status message (ClusterStatus, MemberStatus) as the JSON that
// `psctl status --json` prints and `ps_scheduler --status_file` writes:
// indented, every field present, the .proto's field names.
#ifndef PSTRAIN_COMMON_STATUS_JSON_H_
#define PSTRAIN_COMMON_STATUS_JSON_H_

#include <string>

#include "absl/status/statusor.h"
#include "google/protobuf/message.h"

namespace pstrain {

absl::StatusOr<std::string> StatusJson(const google::protobuf::Message& message);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_STATUS_JSON_H_
