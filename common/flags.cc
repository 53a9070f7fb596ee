#include "common/flags.h"

#include <cstdio>
#include <cstdlib>
#include <set>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pstrain {
namespace {

std::string& Program() {
  static std::string* program = new std::string("pstrain");
  return *program;
}

std::set<std::string>& Given() {
  static std::set<std::string>* given = new std::set<std::string>();
  return *given;
}

// Flags renamed (issue 25: clock counts say clocks; issue 46: a fixed
// slowdown is a straggler; issue 69: a server's copy is a standby): the old name is an unknown
// flag, and the refusal names the new one where this binary has it. A new name may carry the value
// it takes ("straggler=fixed:MS"); the flag is the part before the "=".
constexpr struct {
  absl::string_view old_name;
  absl::string_view new_name;
} kRenamedFlags[] = {{"steps", "clocks"},
                     {"rank", "id"},
                     {"debug_slowdown_ms", "straggler=fixed:MS"},
                     {"replicas", "standby_copies"}};

std::string RenamedHint(absl::string_view name) {
  for (const auto& r : kRenamedFlags) {
    const absl::string_view new_flag = r.new_name.substr(0, r.new_name.find('='));
    if (name == r.old_name && absl::FindCommandLineFlag(new_flag) != nullptr) {
      return absl::StrCat(" (it is now --", r.new_name, ")");
    }
  }
  return "";
}

[[noreturn]] void Refuse(const std::string& message) {
  std::fprintf(stderr, "%s: %s (see --helpfull)\n", Program().c_str(), message.c_str());
  std::exit(2);
}

// Checks one "-name[=value]" or "--name[=value]" argument; *uses_next is set
// when its value is the next argument.
void CheckFlagArgument(absl::string_view arg, const char* next, bool* uses_next) {
  *uses_next = false;
  absl::string_view body = arg.substr(absl::StartsWith(arg, "--") ? 2 : 1);
  const size_t eq = body.find('=');
  const absl::string_view name = body.substr(0, eq);
  // Abseil's usage flags are not registered flags: its parser answers them.
  for (absl::string_view usage : {"help", "helpfull", "helpshort", "helppackage", "helpon",
                                  "helpmatch", "version", "only_check_args"}) {
    if (name == usage) return;
  }
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  if (flag == nullptr && eq == absl::string_view::npos && absl::StartsWith(name, "no")) {
    absl::CommandLineFlag* negated = absl::FindCommandLineFlag(name.substr(2));
    if (negated != nullptr && negated->IsOfType<bool>()) {
      Given().insert(std::string(name.substr(2)));
      return;
    }
  }
  if (flag == nullptr || flag->IsRetired()) {
    Refuse(absl::StrCat("unknown flag --", name, RenamedHint(name)));
  }
  Given().insert(std::string(name));
  std::string value;
  if (eq != absl::string_view::npos) {
    value = std::string(body.substr(eq + 1));
  } else if (flag->IsOfType<bool>()) {
    value = "true";
  } else if (next == nullptr) {
    Refuse(absl::StrCat("--", name, " needs a value"));
  } else {
    value = next;
    *uses_next = true;
  }
  // (Abseil reads an empty value of an optional flag as "not set": refused,
  // since a flag given is a flag given.)
  if (value.empty() && !flag->IsOfType<std::string>()) {
    Refuse(absl::StrCat("--", name, "= needs a value"));
  }
  std::string error;
  if (!flag->ParseFrom(value, &error)) {
    Refuse(absl::StrCat("--", name, "=", value, ": ", error));
  }
}

}  // namespace

std::vector<char*> ParseFlagsOrExit(int argc, char** argv) {
  if (argc > 0) {
    const std::string path = argv[0];
    Program() = path.substr(path.rfind('/') + 1);
  }
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;  // not a flag
    bool uses_next = false;
    CheckFlagArgument(arg, i + 1 < argc ? argv[i + 1] : nullptr, &uses_next);
    if (uses_next) ++i;
  }
  return absl::ParseCommandLine(argc, argv);
}

bool FlagGiven(absl::string_view name) { return Given().count(std::string(name)) > 0; }

absl::Status GiveFlag(absl::string_view name, absl::string_view value) {
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  if (flag == nullptr || flag->IsRetired()) {
    return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, RenamedHint(name)));
  }
  if (value.empty() && !flag->IsOfType<std::string>()) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, "= needs a value"));
  }
  std::string error;
  if (!flag->ParseFrom(value, &error)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, "=", value, ": ", error));
  }
  Given().insert(std::string(name));
  return absl::OkStatus();
}

std::optional<std::string> GivenFlagText(absl::string_view name) {
  if (!FlagGiven(name)) return std::nullopt;
  const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  if (flag == nullptr) return std::nullopt;
  return flag->CurrentValue();
}

absl::Status CheckFlagRanges(std::initializer_list<FlagRange> ranges) {
  for (const FlagRange& r : ranges) {
    if (!r.value.has_value() || (*r.value >= r.min && *r.value <= r.max)) continue;
    return absl::InvalidArgumentError(
        absl::StrCat("--", r.name, "=", *r.value, ": expected an integer in [", r.min, ", ",
                     r.max == std::numeric_limits<int64_t>::max() ? std::string("2^63-1")
                                                                  : absl::StrCat(r.max),
                     "]"));
  }
  return absl::OkStatus();
}

absl::Status CheckFlagChoice(absl::string_view name, const std::optional<std::string>& value,
                             std::initializer_list<absl::string_view> allowed) {
  if (!value.has_value()) return absl::OkStatus();
  for (absl::string_view a : allowed) {
    if (*value == a) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("--", name, "=", *value, ": expected one of ",
                                                 absl::StrJoin(allowed, ", ")));
}

absl::Status CheckFlagNotEmpty(absl::string_view name, const std::optional<std::string>& value,
                               absl::string_view expected) {
  if (!value.has_value() || !value->empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("--", name, "= (empty): expected ", expected));
}

void ExitOnBadFlag(const absl::Status& st) {
  if (!st.ok()) Refuse(std::string(st.message()));
}

}  // namespace pstrain
