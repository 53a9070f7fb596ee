#include "tests/memory_limit.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tests/cluster.h"

namespace pstrain {
namespace testing {
namespace {

bool WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.flush();
  return out.good();
}

// The value of `key` in a "key value" lines file such as memory.events
// (-1 if absent).
int64_t KeyedValue(const std::string& path, const std::string& key) {
  std::istringstream in(ReadFile(path));
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t v = 0;
    if (parts.size() == 2 && parts[0] == key && absl::SimpleAtoi(parts[1], &v)) return v;
  }
  return -1;
}

int64_t NumberIn(const std::string& path) {
  int64_t v = -1;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(path)), &v)) return -1;
  return v;
}

// A new cgroup `name` under `root` limited to `bytes` by `limit_file`, or "".
std::string MakeCgroup(const std::string& root, const std::string& name, int64_t bytes,
                       const std::string& limit_file) {
  const std::string dir = absl::StrCat(root, "/", name);
  if (mkdir(dir.c_str(), 0755) != 0) return "";
  if (!WriteText(absl::StrCat(dir, "/", limit_file), absl::StrCat(bytes))) {
    rmdir(dir.c_str());
    return "";
  }
  return dir;
}

}  // namespace

absl::StatusOr<MemoryLimit> MemoryLimit::Make(const std::string& name, int64_t bytes,
                                              bool allow_rlimit) {
  const std::string unique = absl::StrCat("pstrain_", name, "_", getpid());
  // PSTRAIN_MEMORY_LIMIT=rlimit tries the fallback where cgroups work.
  const char* forced = std::getenv("PSTRAIN_MEMORY_LIMIT");
  if (allow_rlimit && forced != nullptr && std::string(forced) == "rlimit") {
    return MemoryLimit(kRlimitData, "", bytes);
  }
  // cgroup v2: the root's subtree must hand the memory controller down.
  const std::string v2 = "/sys/fs/cgroup";
  if (ReadFile(v2 + "/cgroup.subtree_control").find("memory") != std::string::npos) {
    std::string dir = MakeCgroup(v2, unique, bytes, "memory.max");
    if (!dir.empty()) {
      WriteText(dir + "/memory.swap.max", "0");
      return MemoryLimit(kCgroupV2, std::move(dir), bytes);
    }
  }
  std::string dir = MakeCgroup(v2 + "/memory", unique, bytes, "memory.limit_in_bytes");
  if (!dir.empty()) return MemoryLimit(kCgroupV1, std::move(dir), bytes);
  if (!allow_rlimit) {
    return absl::FailedPreconditionError("no memory cgroup can be made here (needs root)");
  }
  return MemoryLimit(kRlimitData, "", bytes);
}

MemoryLimit::MemoryLimit(MemoryLimit&& other) noexcept
    : kind_(other.kind_), dir_(std::exchange(other.dir_, "")), bytes_(other.bytes_) {}

MemoryLimit::~MemoryLimit() {
  if (!dir_.empty()) rmdir(dir_.c_str());
}

std::vector<std::string> MemoryLimit::prefix() const {
  if (kind_ == kRlimitData) {
    // dash's and bash's ulimit -d: KiB, soft and hard. RLIMIT_DATA counts
    // every thread's whole stack (glibc sizes them by RLIMIT_STACK, 8 MiB
    // by default): 1 MiB stacks keep a daemon's 15 or so threads from
    // using up the limit with memory they never touch.
    return {"/bin/sh", "-c",
            absl::StrCat("ulimit -s 1024 && ulimit -d ", bytes_ / 1024, " && exec \"$@\""),
            "sh"};
  }
  return {"/bin/sh", "-c", absl::StrCat("echo $$ >", dir_, "/cgroup.procs && exec \"$@\""), "sh"};
}

std::string MemoryLimit::Describe() const {
  switch (kind_) {
    case kCgroupV2:
      return absl::StrCat("cgroup v2 ", dir_, " (memory.max ", bytes_, ")");
    case kCgroupV1:
      return absl::StrCat("cgroup v1 ", dir_, " (memory.limit_in_bytes ", bytes_, ")");
    case kRlimitData:
      break;
  }
  return absl::StrCat("RLIMIT_DATA ", bytes_);
}

int64_t MemoryLimit::OomKills() const {
  switch (kind_) {
    case kCgroupV2:
      return KeyedValue(dir_ + "/memory.events", "oom_kill");
    case kCgroupV1:
      return KeyedValue(dir_ + "/memory.oom_control", "oom_kill");
    case kRlimitData:
      break;
  }
  return 0;
}

int64_t MemoryLimit::PeakBytes() const {
  switch (kind_) {
    case kCgroupV2:
      return NumberIn(dir_ + "/memory.peak");
    case kCgroupV1:
      return NumberIn(dir_ + "/memory.max_usage_in_bytes");
    case kRlimitData:
      break;
  }
  return -1;
}

}  // namespace testing
}  // namespace pstrain
