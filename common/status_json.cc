#include "common/status_json.h"

#include "google/protobuf/util/json_util.h"

namespace pstrain {

absl::StatusOr<std::string> StatusJson(const google::protobuf::Message& message) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(message, &out, options).ok()) {
    return absl::InternalError("cannot print the status as JSON");
  }
  return out;
}

}  // namespace pstrain
