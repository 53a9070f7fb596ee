#include "scheduler/manifest.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checkpoint_names.h"
#include "common/daemon.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"

namespace pstrain {
namespace {

std::string ManifestPath(const std::string& dir) { return dir + "/manifest.json"; }

}  // namespace

absl::StatusOr<std::optional<Manifest>> ReadManifest(const std::string& dir) {
  const std::string path = ManifestPath(dir);
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::optional<Manifest>();
  std::stringstream text;
  text << in.rdbuf();
  auto bad = [&path](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", why));
  };
  if (text.str().size() > (1 << 20)) return bad("larger than 1 MiB");
  google::protobuf::Struct json;
  if (!google::protobuf::util::JsonStringToMessage(text.str(), &json).ok()) {
    return bad("not a JSON object");
  }
  const auto& f = json.fields();
  auto clock = f.find("clock"), servers = f.find("servers"), files = f.find("files");
  if (clock == f.end() || servers == f.end() || files == f.end() ||
      clock->second.kind_case() != google::protobuf::Value::kNumberValue ||
      servers->second.kind_case() != google::protobuf::Value::kNumberValue ||
      files->second.kind_case() != google::protobuf::Value::kListValue) {
    return bad("expected \"clock\", \"servers\" and \"files\"");
  }
  const double c = clock->second.number_value(), n = servers->second.number_value();
  if (!(c >= 0 && c < 9e15) || c != static_cast<double>(static_cast<int64_t>(c)) ||
      !(n >= 1 && n <= 1e6) || n != static_cast<double>(static_cast<int>(n))) {
    return bad("bad clock or server count");
  }
  Manifest m;
  m.clock = static_cast<int64_t>(c);
  m.num_servers = static_cast<int>(n);
  for (const auto& v : files->second.list_value().values()) {
    const std::string& name = v.string_value();
    if (name.empty() || name.find('/') != std::string::npos) return bad("bad file name");
    if (!std::filesystem::exists(dir + "/" + name)) {
      return absl::NotFoundError(absl::StrCat(path, " names ", name, ", which is missing"));
    }
    m.files.push_back(name);
  }
  return std::optional<Manifest>(m);
}

absl::Status WriteManifest(const std::string& dir, int64_t clock, int num_servers,
                           const std::vector<int>& servers) {
  std::vector<std::string> names;
  for (int s : servers) {
    names.push_back(absl::StrCat("\"server-", s, "-clock-", clock, ".safetensors\""));
  }
  const std::string text = absl::StrCat(
      "{\"format\": \"pstrain checkpoint manifest\", \"clock\": ", clock,
      ", \"servers\": ", num_servers, ", \"files\": [", absl::StrJoin(names, ", "), "]}\n");
  return WriteFileDurably(ManifestPath(dir), text);
}

int64_t NewestCompleteSet(const std::string& dir, const std::vector<int>& servers,
                          int64_t at_most, const std::vector<std::string>& tables) {
  if (servers.empty()) return 0;
  std::set<int64_t> common;
  for (size_t i = 0; i < servers.size(); ++i) {
    const std::vector<int64_t> clocks = CheckpointClocks(dir, servers[i]);
    std::set<int64_t> mine(clocks.begin(), clocks.end());
    for (const std::string& table : tables) {  // each table's file of the clock too
      const std::vector<int64_t> have = TableCheckpointClocks(dir, servers[i], table);
      std::set<int64_t> both;
      for (int64_t c : have) {
        if (mine.count(c) > 0) both.insert(c);
      }
      mine = std::move(both);
    }
    if (i == 0) {
      common = mine;
    } else {
      std::set<int64_t> both;
      std::set_intersection(common.begin(), common.end(), mine.begin(), mine.end(),
                            std::inserter(both, both.begin()));
      common = both;
    }
  }
  for (auto it = common.rbegin(); it != common.rend(); ++it) {
    if (*it <= at_most) return *it;
  }
  return 0;
}

absl::Status WriteCheckpointJob(const JobSpec& job) {
  if (job.checkpoint_dir().empty()) return absl::OkStatus();
  std::error_code error;
  std::filesystem::create_directories(job.checkpoint_dir(), error);
  if (error) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint_dir ", job.checkpoint_dir(), ": ", error.message()));
  }
  std::string text;
  google::protobuf::TextFormat::PrintToString(job, &text);
  return WriteFileAtomically(CheckpointJobPath(job.checkpoint_dir()), text);
}

}  // namespace pstrain
