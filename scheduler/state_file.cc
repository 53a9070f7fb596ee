#include "scheduler/state_file.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/daemon.h"
#include "google/protobuf/text_format.h"

namespace pstrain {
namespace {

constexpr char kFormat[] = "pstrain scheduler state";
constexpr size_t kMaxBytes = 64 << 20;

}  // namespace

std::string SchedulerStatePath(const std::string& state_dir) {
  return state_dir + "/scheduler.state";
}

absl::StatusOr<std::optional<SchedulerState>> ReadSchedulerState(const std::string& state_dir) {
  const std::string path = SchedulerStatePath(state_dir);
  std::error_code error;
  if (!std::filesystem::exists(path, error) && !error) return std::optional<SchedulerState>();
  std::ifstream in(path, std::ios::binary);
  if (error || !in) {
    return absl::PermissionDeniedError(absl::StrCat(path, ": cannot read"));
  }
  std::stringstream text;
  text << in.rdbuf();
  auto bad = [&path](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", why, " (move it away to start a new job on this --state_dir)"));
  };
  if (text.str().size() > kMaxBytes) return bad("larger than 64 MiB");
  SchedulerState state;
  if (!google::protobuf::TextFormat::ParseFromString(text.str(), &state)) {
    return bad("not a text-format pstrain.SchedulerState");
  }
  if (state.format() != kFormat) return bad(absl::StrCat("no format: \"", kFormat, "\""));
  return std::optional<SchedulerState>(std::move(state));
}

absl::Status WriteSchedulerState(const std::string& state_dir, const SchedulerState& state) {
  std::error_code error;
  std::filesystem::create_directories(state_dir, error);
  if (error) {
    return absl::InvalidArgumentError(
        absl::StrCat("--state_dir=", state_dir, ": ", error.message()));
  }
  std::string text;
  if (!google::protobuf::TextFormat::PrintToString(state, &text)) {
    return absl::InternalError("cannot print the scheduler state");
  }
  return WriteFileDurably(SchedulerStatePath(state_dir), text);
}

}  // namespace pstrain
