#include "tools/export.h"

#include <cstring>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checkpoint_names.h"
#include "common/daemon.h"
#include "common/params.h"
#include "common/partition.h"
#include "common/status_macros.h"
#include "scheduler/manifest.h"
#include "server/checkpoint.h"
#include "server/checkpoint_set.h"

namespace pstrain {
namespace {

// A tensor of the export: F32 values or I64 ids, in its shape.
struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;  // F32, or
  std::vector<uint64_t> ids;  // I64 (the ids' bits)
  bool is_ids = false;
};

// The safetensors bytes of `tensors`.
std::string Safetensors(const std::vector<Tensor>& tensors, int64_t clock,
                        const std::string& job_name) {
  std::vector<std::string> entries;
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    const int64_t bytes = t.is_ids ? static_cast<int64_t>(t.ids.size()) * 8
                                   : static_cast<int64_t>(t.values.size()) * 4;
    entries.push_back(absl::StrCat("\"", t.name, "\":{\"dtype\":\"", t.is_ids ? "I64" : "F32",
                                   "\",\"shape\":[", absl::StrJoin(t.shape, ","),
                                   "],\"data_offsets\":[", offset, ",", offset + bytes, "]}"));
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
  for (const Tensor& t : tensors) {
    if (t.is_ids) {
      out.append(reinterpret_cast<const char*>(t.ids.data()), t.ids.size() * 8);
    } else {
      out.append(reinterpret_cast<const char*>(t.values.data()), t.values.size() * 4);
    }
  }
  return out;
}

// Table `spec`'s rows from the files of `clock` of every server of
// `servers` (those with chunk files of the clock: under any placement, each
// held its part of every table): "<name>.ids" (I64 [n]) and
// "<name>.weight" (F32 [n, width]; no optimizer state).
absl::Status AddTable(const std::string& dir, const std::vector<int>& servers,
                      const TableSpec& spec, int64_t clock, std::vector<Tensor>* out) {
  Tensor ids{spec.name() + ".ids"}, weight{spec.name() + ".weight"};
  ids.is_ids = true;
  for (const Tensor& t : *out) {
    if (t.name == ids.name || t.name == weight.name) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table '", spec.name(), "' would be exported as ", t.name, ", which the model has"));
    }
  }
  const int64_t width = spec.width();
  for (int s : servers) {
    ASSIGN_OR_RETURN(const CheckpointFile f,
                     CheckpointFile::Open(TableCheckpointPath(dir, s, clock, spec.name())));
    ASSIGN_OR_RETURN(const int64_t n, f.Count("ids"));
    ASSIGN_OR_RETURN(const int64_t floats, f.Count("rows"));
    const bool fits = n == 0 ? floats == 0 : floats % n == 0 && floats / n >= width;
    if (f.Text("table") != spec.name() || !fits) {
      return absl::InvalidArgumentError(
          absl::StrCat(f.path(), " does not hold table '", spec.name(), "' of width ", width));
    }
    if (n == 0) continue;
    const int64_t stride = floats / n;
    const size_t first = ids.ids.size();
    ids.ids.resize(first + n);
    RETURN_IF_ERROR(f.ReadIds("ids", ids.ids.data() + first, n));
    std::vector<float> rows(static_cast<size_t>(floats));
    RETURN_IF_ERROR(f.Read("rows", rows.data(), floats));
    for (int64_t i = 0; i < n; ++i) {
      weight.values.insert(weight.values.end(), rows.begin() + i * stride,
                           rows.begin() + i * stride + width);
    }
  }
  ids.shape = {static_cast<int64_t>(ids.ids.size())};
  weight.shape = {static_cast<int64_t>(ids.ids.size()), width};
  out->push_back(std::move(ids));
  out->push_back(std::move(weight));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int64_t> ExportCheckpoint(const std::string& dir, const JobSpec& job,
                                         const std::string& out) {
  ASSIGN_OR_RETURN(const std::optional<Manifest> manifest, ReadManifest(dir));
  if (!manifest.has_value()) {
    return absl::NotFoundError(absl::StrCat(dir, ": no manifest.json (no complete checkpoint)"));
  }
  const std::vector<ParamInfo> params = ModelParams(job.model());
  // (Any server count cuts the same chunks.)
  ASSIGN_OR_RETURN(const Partition partition, Partition::Make(params, job.chunk_bytes(), 1));
  ASSIGN_OR_RETURN(const CheckpointSet set, CheckpointSet::Open(dir, manifest->clock));
  std::vector<Tensor> tensors(params.size());
  for (size_t p = 0; p < params.size(); ++p) {
    tensors[p].name = params[p].name;
    tensors[p].shape = params[p].shape;
    tensors[p].values.resize(params[p].numel);
  }
  for (const ChunkInfo& c : partition.chunks()) {
    const std::string name =
        absl::StrCat(params[c.param].name, "[", c.offset, ":", c.offset + c.numel, "]");
    absl::StatusOr<const CheckpointFile*> file = set.Holding(name);
    const absl::Status read =
        file.ok() ? (*file)->Read(name, tensors[c.param].values.data() + c.offset, c.numel)
                  : file.status();
    if (!read.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(read.message(), " (is this the job the checkpoint is of?)"));
    }
  }
  for (const TableSpec& spec : job.tables()) {
    RETURN_IF_ERROR(AddTable(dir, set.servers(), spec, manifest->clock, &tensors));
  }
  RETURN_IF_ERROR(WriteFileAtomically(out, Safetensors(tensors, manifest->clock, job.name())));
  return manifest->clock;
}

}  // namespace pstrain
