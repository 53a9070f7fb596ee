#include "common/logging.h"

#include "absl/strings/str_cat.h"

namespace pstrain {

void SetLogIdentity(const std::string& role, int id) {
  const std::string who = id < 0 ? role : absl::StrCat(role, " ", id);
  spdlog::set_pattern(absl::StrCat("[%H:%M:%S.%e] [", who, "] [%l] %v"));
}

}  // namespace pstrain
