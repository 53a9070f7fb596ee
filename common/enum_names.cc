#include "common/enum_names.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "google/protobuf/descriptor.h"

namespace pstrain {
namespace {

// Values whose proto name is not the word people type.
constexpr struct {
  absl::string_view proto_name;
  absl::string_view word;
} kSpellings[] = {{"ONE_F_ONE_B", "1f1b"}};

bool HasWord(const google::protobuf::EnumValueDescriptor& value) {
  return !absl::EndsWith(value.name(), "_UNSPECIFIED");
}

std::string WordOf(const google::protobuf::EnumValueDescriptor& value) {
  for (const auto& s : kSpellings) {
    if (value.name() == s.proto_name) return std::string(s.word);
  }
  return absl::AsciiStrToLower(value.name());
}

}  // namespace

std::string EnumWord(const google::protobuf::EnumDescriptor* type, int number,
                     absl::string_view unknown) {
  const google::protobuf::EnumValueDescriptor* value = type->FindValueByNumber(number);
  if (value == nullptr || !HasWord(*value)) return std::string(unknown);
  return WordOf(*value);
}

std::optional<int> ParseEnumWord(const google::protobuf::EnumDescriptor* type,
                                 absl::string_view word) {
  const std::string lower = absl::AsciiStrToLower(word);
  for (int i = 0; i < type->value_count(); ++i) {
    const google::protobuf::EnumValueDescriptor& value = *type->value(i);
    if (HasWord(value) && WordOf(value) == lower) return value.number();
  }
  return std::nullopt;
}

std::vector<std::string> EnumWords(const google::protobuf::EnumDescriptor* type) {
  std::vector<std::string> words;
  for (int i = 0; i < type->value_count(); ++i) {
    if (HasWord(*type->value(i))) words.push_back(WordOf(*type->value(i)));
  }
  return words;
}

}  // namespace pstrain
