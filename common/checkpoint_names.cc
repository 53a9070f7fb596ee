#include "common/checkpoint_names.h"

#include <algorithm>
#include <filesystem>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace pstrain {

std::string CheckpointPath(const std::string& dir, int server_id, int64_t clock) {
  return absl::StrCat(dir, "/server-", server_id, "-clock-", clock, ".safetensors");
}

namespace {

// The clocks <c> of the files in `dir` named prefix<c>suffix, ascending.
std::vector<int64_t> ClocksOf(const std::string& dir, const std::string& prefix,
                              const std::string& suffix) {
  std::vector<int64_t> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= prefix.size() + suffix.size() ||
        name.compare(0, prefix.size(), prefix) != 0 ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    int64_t clock;
    if (absl::SimpleAtoi(name.substr(prefix.size(), name.size() - prefix.size() - suffix.size()),
                         &clock) &&
        clock >= 0) {
      out.push_back(clock);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::vector<int64_t> CheckpointClocks(const std::string& dir, int server_id) {
  return ClocksOf(dir, absl::StrCat("server-", server_id, "-clock-"), ".safetensors");
}

std::vector<int> CheckpointServers(const std::string& dir, int64_t clock) {
  std::vector<int> out;
  for (int64_t s : ClocksOf(dir, "server-", absl::StrCat("-clock-", clock, ".safetensors"))) {
    if (s <= std::numeric_limits<int32_t>::max()) out.push_back(static_cast<int>(s));
  }
  return out;
}

std::string TableCheckpointPath(const std::string& dir, int server_id, int64_t clock,
                                const std::string& table) {
  return absl::StrCat(dir, "/server-", server_id, "-clock-", clock, ".table-", table,
                      ".safetensors");
}

std::vector<int64_t> TableCheckpointClocks(const std::string& dir, int server_id,
                                           const std::string& table) {
  return ClocksOf(dir, absl::StrCat("server-", server_id, "-clock-"),
                  absl::StrCat(".table-", table, ".safetensors"));
}

std::string CheckpointJobPath(const std::string& dir) { return dir + "/job.pbtxt"; }

}  // namespace pstrain
