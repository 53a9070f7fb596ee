#include "scheduler/state_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
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

absl::StatusOr<std::unique_ptr<StateDirLock>> StateDirLock::Take(const std::string& state_dir) {
  std::error_code error;
  std::filesystem::create_directories(state_dir, error);
  if (error) {
    return absl::InvalidArgumentError(
        absl::StrCat("--state_dir=", state_dir, ": ", error.message()));
  }
  const std::string path = state_dir + "/scheduler.lock";
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::PermissionDeniedError(absl::StrCat(path, ": ", std::strerror(errno)));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int why = errno;
    char holder[256] = {};
    const ssize_t n = pread(fd, holder, sizeof(holder) - 1, 0);
    close(fd);
    if (why != EWOULDBLOCK) {
      return absl::PermissionDeniedError(absl::StrCat(path, ": ", std::strerror(why)));
    }
    std::string who = n > 0 ? std::string(holder, n) : "a process starting";
    while (!who.empty() && who.back() == '\n') who.pop_back();
    return absl::FailedPreconditionError(absl::StrCat(
        "--state_dir=", state_dir, " is held by another scheduler (", who,
        "): one scheduler a job; stop it first, or use another --state_dir"));
  }
  std::unique_ptr<StateDirLock> lock(new StateDirLock(fd));
  lock->Describe("");
  return lock;
}

StateDirLock::~StateDirLock() { close(fd_); }

void StateDirLock::Describe(const std::string& address) {
  const std::string text =
      address.empty() ? absl::StrCat("pid ", getpid(), "\n")
                      : absl::StrCat("pid ", getpid(), ", serving on ", address, "\n");
  // Best effort: the lock, not the text, keeps others out.
  if (ftruncate(fd_, 0) == 0 && pwrite(fd_, text.data(), text.size(), 0) < 0) return;
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
