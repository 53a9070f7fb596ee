// The words flags, logs, metrics and psctl use for the protos' enum values:
// the proto's own name (Foo_Name / the enum's descriptor) in lower case --
// BSP "bsp", FP16 "fp16", WORKER "worker" -- the one exception being
// ONE_F_ONE_B, written "1f1b". Parsing is the inverse, case-insensitive.
// A *_UNSPECIFIED value, or a number the enum does not name, has no word.
// Thread-safe (the descriptors are immutable).
#ifndef PSTRAIN_COMMON_ENUM_NAMES_H_
#define PSTRAIN_COMMON_ENUM_NAMES_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "google/protobuf/generated_enum_reflection.h"

namespace pstrain {

// The word for value `number` of `type`; `unknown` when it has none.
std::string EnumWord(const google::protobuf::EnumDescriptor* type, int number,
                     absl::string_view unknown);
// The number of the value `word` names (any case); nullopt when none does.
std::optional<int> ParseEnumWord(const google::protobuf::EnumDescriptor* type,
                                 absl::string_view word);
// Every word of `type`, in the order of the values' numbers: the choices
// of a flag ("bsp", "ssp", "asp").
std::vector<std::string> EnumWords(const google::protobuf::EnumDescriptor* type);

template <typename E>
std::string EnumWord(E value, absl::string_view unknown = "unknown") {
  return EnumWord(google::protobuf::GetEnumDescriptor<E>(), static_cast<int>(value), unknown);
}

template <typename E>
std::optional<E> ParseEnumWord(absl::string_view word) {
  const std::optional<int> n = ParseEnumWord(google::protobuf::GetEnumDescriptor<E>(), word);
  if (!n.has_value()) return std::nullopt;
  return static_cast<E>(*n);
}

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_ENUM_NAMES_H_
