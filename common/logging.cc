#include "common/logging.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "spdlog/sinks/stdout_color_sinks.h"

namespace pstrain {

void SetLogIdentity(const std::string& role, int id) {
  const std::string who = id < 0 ? role : absl::StrCat(role, " ", id);
  spdlog::set_pattern(absl::StrCat("[%H:%M:%S.%e] [", who, "] [%l] %v"));
}

void LogToStderr() {
  // Unnamed, as the default logger is (the name would show in every line).
  auto logger =
      std::make_shared<spdlog::logger>("", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  logger->set_level(spdlog::default_logger()->level());
  spdlog::set_default_logger(std::move(logger));
}

}  // namespace pstrain
