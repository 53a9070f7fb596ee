#include "tools/export.h"

#include <cstring>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/daemon.h"
#include "common/params.h"
#include "common/partition.h"
#include "common/status_macros.h"
#include "scheduler/manifest.h"
#include "server/checkpoint.h"

namespace pstrain {
namespace {

// The safetensors bytes of `params` (names, shapes) holding `values`.
std::string Safetensors(const std::vector<ParamInfo>& params,
                        const std::vector<std::vector<float>>& values, int64_t clock,
                        const std::string& job_name) {
  std::vector<std::string> entries;
  int64_t offset = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t bytes = params[i].numel * 4;
    entries.push_back(absl::StrCat("\"", params[i].name, "\":{\"dtype\":\"F32\",\"shape\":[",
                                   absl::StrJoin(params[i].shape, ","), "],\"data_offsets\":[",
                                   offset, ",", offset + bytes, "]}"));
    offset += bytes;
  }
  std::string name;  // the job's name as a JSON string's content
  for (char ch : job_name) {
    if (ch == '"' || ch == '\\') name += '\\';
    if (static_cast<unsigned char>(ch) >= 0x20) name += ch;
  }
  entries.push_back(absl::StrCat("\"__metadata__\":{\"clock\":\"", clock, "\",\"job\":\"", name,
                                 "\",\"format\":\"pstrain export\"}"));
  std::string header = "{" + absl::StrJoin(entries, ",") + "}";
  header.append((8 - header.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int b = 0; b < 8; ++b) out[b] = static_cast<char>((n >> (8 * b)) & 0xff);
  out += header;
  for (const std::vector<float>& v : values) {
    out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  }
  return out;
}

}  // namespace

absl::StatusOr<int64_t> ExportCheckpoint(const std::string& dir, const JobSpec& job,
                                         const std::string& out) {
  ASSIGN_OR_RETURN(const std::optional<Manifest> manifest, ReadManifest(dir));
  if (!manifest.has_value()) {
    return absl::NotFoundError(absl::StrCat(dir, ": no manifest.json (no complete checkpoint)"));
  }
  const std::vector<ParamInfo> params = ModelParams(job.model());
  ASSIGN_OR_RETURN(const Partition partition,
                   Partition::Make(params, job.chunk_bytes(), job.num_servers()));
  std::map<int, CheckpointFile> files;
  for (int s = 0; s < job.num_servers(); ++s) {
    if (partition.ServerChunks(s).empty()) continue;
    absl::StatusOr<CheckpointFile> f =
        CheckpointFile::Open(CheckpointPath(dir, s, manifest->clock));
    if (!f.ok()) return f.status();
    files.emplace(s, std::move(*f));
  }
  std::vector<std::vector<float>> values(params.size());
  for (size_t p = 0; p < params.size(); ++p) values[p].resize(params[p].numel);
  for (const ChunkInfo& c : partition.chunks()) {
    const std::string name = absl::StrCat(params[c.param].name, "[", c.offset, ":",
                                          c.offset + c.numel, "]");
    const absl::Status read =
        files.at(c.server).Read(name, values[c.param].data() + c.offset, c.numel);
    if (!read.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(read.message(), " (is this the job the checkpoint is of?)"));
    }
  }
  RETURN_IF_ERROR(
      WriteFileAtomically(out, Safetensors(params, values, manifest->clock, job.name())));
  return manifest->clock;
}

}  // namespace pstrain
