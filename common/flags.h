// Strict command lines for every binary: an unknown flag, a value that does
// not parse and a value outside its allowed range all end the process with
// exit code 2 and one line naming the flag (Abseil's own parser exits 1;
// a flag that was renamed is named with its new name too), and a flag
// given with any value -- its default's included -- is told apart from a
// flag not given.
#ifndef PSTRAIN_COMMON_FLAGS_H_
#define PSTRAIN_COMMON_FLAGS_H_

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace pstrain {

// Parses the command line as absl::ParseCommandLine does (and returns the
// arguments that are not flags, argv[0] first), after checking every flag
// on it: unknown, missing its value or not parsing is exit 2.
std::vector<char*> ParseFlagsOrExit(int argc, char** argv);

// Whether --name was on the command line (after ParseFlagsOrExit).
bool FlagGiven(absl::string_view name);
// Sets --name=value as the command line would (and marks it given):
// INVALID_ARGUMENT naming the flag for an unknown one or a bad value. For
// a library in another program's process (worker/external), which has no
// command line.
absl::Status GiveFlag(absl::string_view name, absl::string_view value);

// The flag's value when it was given, else nullopt.
template <typename T>
std::optional<T> GivenFlag(const absl::Flag<T>& flag) {
  if (!FlagGiven(absl::GetFlagReflectionHandle(flag).Name())) return std::nullopt;
  return absl::GetFlag(flag);
}

// The value of --name as text (absl's CurrentValue) when it was given, else
// nullopt: for a table of flags known by name (scheduler/spec_overrides.h).
std::optional<std::string> GivenFlagText(absl::string_view name);

// An integer flag's allowed values, [min, max].
struct FlagRange {
  absl::string_view name;
  std::optional<int64_t> value;  // nullopt: not given (nothing to check)
  int64_t min = 0;
  int64_t max = std::numeric_limits<int64_t>::max();
};

// INVALID_ARGUMENT "--name=V: expected an integer in [min, max]" for the
// first given value outside its range.
absl::Status CheckFlagRanges(std::initializer_list<FlagRange> ranges);

// INVALID_ARGUMENT "--name=V: expected one of a, b, c" unless the value,
// when given, is one of `allowed` (a flag given empty is refused too).
absl::Status CheckFlagChoice(absl::string_view name, const std::optional<std::string>& value,
                             std::initializer_list<absl::string_view> allowed);

// INVALID_ARGUMENT "--name= (empty): expected a path" for a string flag
// given with an empty value.
absl::Status CheckFlagNotEmpty(absl::string_view name, const std::optional<std::string>& value,
                               absl::string_view expected);

// Prints "program: message" to stderr and exits 2 when `st` is not OK.
void ExitOnBadFlag(const absl::Status& st);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_FLAGS_H_
