#include "server/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace pstrain {
absl::Status FileError(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

absl::Status WriteFileAt(int fd, const void* data, int64_t bytes, int64_t at,
                         const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = pwrite(fd, p, static_cast<size_t>(bytes), at);
    if (n < 0) {
      if (errno == EINTR) continue;
      return FileError("cannot write", path);
    }
    p += n;
    at += n;
    bytes -= n;
  }
  return absl::OkStatus();
}

namespace {

// `text` as a JSON string (the names hold no control characters).
std::string Quote(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

}  // namespace

CheckpointWriter::CheckpointWriter(std::string dir, int server_id, std::string optimizer,
                                   std::vector<Chunk> chunks, std::vector<std::string> tables)
    : dir_(std::move(dir)),
      server_id_(server_id),
      optimizer_(std::move(optimizer)),
      chunks_(std::move(chunks)),
      tables_(std::move(tables)) {
  for (size_t i = 0; i < chunks_.size(); ++i) {
    index_[chunks_[i].id] = i;
    offsets_.push_back(data_bytes_);
    data_bytes_ += (chunks_[i].weight_floats + chunks_[i].state_floats) * 4;
  }
  // Room for the longest header: the largest clock and step counts.
  std::map<int32_t, int64_t> big;
  for (const Chunk& c : chunks_) big[c.id] = INT64_MAX;
  header_room_ = (static_cast<int64_t>(Header(INT64_MAX, big).size()) + 7) / 8 * 8;
}

CheckpointWriter::~CheckpointWriter() {
  absl::MutexLock lock(&mu_);
  for (auto& [clock, open] : open_) {
    close(open.fd);
    unlink(open.tmp.c_str());  // never completed
  }
}

std::string CheckpointWriter::Header(int64_t clock, const std::map<int32_t, int64_t>& steps) const {
  std::string h = "{\"__metadata__\":{\"format\":\"pstrain server checkpoint\"";
  absl::StrAppend(&h, ",\"clock\":\"", clock, "\",\"server\":\"", server_id_,
                  "\",\"optimizer\":", Quote(optimizer_));
  for (const auto& [chunk, n] : steps) {
    absl::StrAppend(&h, ",", Quote(absl::StrCat("steps/", chunks_[index_.at(chunk)].name)), ":\"",
                    n, "\"");
  }
  h += "}";
  for (size_t i = 0; i < chunks_.size(); ++i) {
    const Chunk& c = chunks_[i];
    const int64_t w = offsets_[i], s = w + c.weight_floats * 4;
    absl::StrAppend(&h, ",", Quote(c.name), ":{\"dtype\":\"F32\",\"shape\":[", c.weight_floats,
                    "],\"data_offsets\":[", w, ",", s, "]}");
    if (c.state_floats > 0) {
      absl::StrAppend(&h, ",", Quote(c.name + "/state"), ":{\"dtype\":\"F32\",\"shape\":[",
                      c.state_floats, "],\"data_offsets\":[", s, ",", s + c.state_floats * 4, "]}");
    }
  }
  h += "}";
  return h;
}

absl::Status CheckpointWriter::Write(int64_t clock, int32_t chunk, const float* weights,
                                     const float* state, int64_t steps) {
  auto it = index_.find(chunk);
  if (it == index_.end()) return absl::InvalidArgumentError(absl::StrCat("chunk ", chunk));
  const Chunk& c = chunks_[it->second];
  int fd;
  std::string tmp;
  int64_t data_start;
  {
    absl::MutexLock lock(&mu_);
    auto [entry, fresh] = open_.try_emplace(clock);
    Open& open = entry->second;
    if (fresh) {
      std::error_code ec;
      std::filesystem::create_directories(dir_, ec);
      open.path = CheckpointPath(dir_, server_id_, clock);
      open.tmp = open.path + ".tmp";
      open.fd = ::open(open.tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (open.fd < 0) {
        const absl::Status st = FileError("cannot create", open.tmp);
        open_.erase(entry);
        return st;
      }
      open.data_start = 8 + header_room_;
      open.remaining = chunks_.size();
    }
    fd = open.fd;
    tmp = open.tmp;
    data_start = open.data_start;
  }
  const int64_t at = data_start + offsets_[it->second];
  absl::Status st = WriteFileAt(fd, weights, c.weight_floats * 4, at, tmp);
  if (st.ok() && c.state_floats > 0) {
    st = WriteFileAt(fd, state, c.state_floats * 4, at + c.weight_floats * 4, tmp);
  }
  absl::MutexLock lock(&mu_);
  Open& open = open_.at(clock);
  open.steps[chunk] = steps;
  if (!st.ok()) return st;
  if (--open.remaining > 0) return absl::OkStatus();
  st = Finish(clock, open);
  open_.erase(clock);
  return st;
}

absl::Status CheckpointWriter::Finish(int64_t clock, Open& open) {
  std::string header = Header(clock, open.steps);
  header.resize(header_room_, ' ');  // safetensors pads the header with spaces
  const uint64_t n = header.size();
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(n >> (8 * i));
  absl::Status st = WriteFileAt(open.fd, length, 8, 0, open.tmp);
  if (st.ok()) st = WriteFileAt(open.fd, header.data(), static_cast<int64_t>(n), 8, open.tmp);
  if (st.ok() && fsync(open.fd) != 0) st = FileError("cannot fsync", open.tmp);
  close(open.fd);
  if (st.ok() && std::rename(open.tmp.c_str(), open.path.c_str()) != 0) {
    st = FileError("cannot rename", open.tmp);
  }
  if (!st.ok()) {
    unlink(open.tmp.c_str());
    return st;
  }
  if (clock > latest_) latest_ = clock;
  return absl::OkStatus();
}

void CheckpointWriter::Rollback(int64_t clock) {
  {
    absl::MutexLock lock(&mu_);
    for (auto& [c, open] : open_) {
      close(open.fd);
      unlink(open.tmp.c_str());
    }
    open_.clear();
  }
  Delete([clock](int64_t c) { return c > clock; });
  latest_ = clock;
}

void CheckpointWriter::Prune(int64_t clock) {
  Delete([clock](int64_t c) { return c < clock; });
}

void CheckpointWriter::Delete(const std::function<bool(int64_t)>& drop) const {
  for (int64_t c : CheckpointClocks(dir_, server_id_)) {
    if (drop(c)) std::remove(CheckpointPath(dir_, server_id_, c).c_str());
  }
  for (const std::string& table : tables_) {
    for (int64_t c : TableCheckpointClocks(dir_, server_id_, table)) {
      if (drop(c)) std::remove(TableCheckpointPath(dir_, server_id_, c, table).c_str());
    }
  }
}

namespace {

absl::Status Bad(const std::string& path, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, ": ", why));
}

// A JSON number that is a whole byte count or size (exact in a double).
bool WholeNumber(const google::protobuf::Value& v, int64_t* out) {
  if (v.kind_case() != google::protobuf::Value::kNumberValue) return false;
  const double d = v.number_value();
  if (!(d >= 0 && d <= 9007199254740992.0) || d != static_cast<double>(static_cast<int64_t>(d))) {
    return false;
  }
  *out = static_cast<int64_t>(d);
  return true;
}

// A metadata value: a string holding a whole number.
bool MetadataNumber(const google::protobuf::Struct& meta, const std::string& key, int64_t* out) {
  auto it = meta.fields().find(key);
  return it != meta.fields().end() &&
         it->second.kind_case() == google::protobuf::Value::kStringValue &&
         absl::SimpleAtoi(it->second.string_value(), out);
}

}  // namespace

// A tensor's entry in the header: F32, a shape, and data offsets inside the
// file's data (data_bytes from data_start) that match the shape.
absl::StatusOr<CheckpointFile::Tensor> ParseTensor(const std::string& path, const std::string& name,
                                                   const google::protobuf::Value& value,
                                                   int64_t data_start, int64_t data_bytes) {
  if (value.kind_case() != google::protobuf::Value::kStructValue) {
    return Bad(path, absl::StrCat("tensor ", name, " is not an object"));
  }
  const auto& t = value.struct_value().fields();
  auto dtype = t.find("dtype"), shape = t.find("shape"), offsets = t.find("data_offsets");
  if (dtype == t.end() ||
      (dtype->second.string_value() != "F32" && dtype->second.string_value() != "I64")) {
    return Bad(path, absl::StrCat("tensor ", name, " is not F32 or I64"));
  }
  const bool ids = dtype->second.string_value() == "I64";
  const int64_t size = ids ? 8 : 4;
  int64_t numel = 1, begin = 0, end = 0;
  if (shape == t.end() || shape->second.kind_case() != google::protobuf::Value::kListValue) {
    return Bad(path, absl::StrCat("tensor ", name, " has no shape"));
  }
  for (const auto& d : shape->second.list_value().values()) {
    int64_t dim;
    if (!WholeNumber(d, &dim) || (dim > 0 && numel > (int64_t{1} << 50) / dim)) {
      return Bad(path, absl::StrCat("tensor ", name, " has a bad shape"));
    }
    numel *= dim;
  }
  if (offsets == t.end() || offsets->second.kind_case() != google::protobuf::Value::kListValue ||
      offsets->second.list_value().values_size() != 2 ||
      !WholeNumber(offsets->second.list_value().values(0), &begin) ||
      !WholeNumber(offsets->second.list_value().values(1), &end) || begin > end ||
      end > data_bytes || end - begin != numel * size) {
    return Bad(path, absl::StrCat("tensor ", name, " has bad data_offsets"));
  }
  return CheckpointFile::Tensor{data_start + begin, numel, ids};
}

absl::StatusOr<CheckpointFile> CheckpointFile::Open(const std::string& path) {
  const int raw = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (raw < 0)
    return absl::NotFoundError(
        absl::StrCat("cannot open checkpoint ", path, ": ", std::strerror(errno)));
  CheckpointFile f;
  f.path_ = path;
  f.fd_ = std::shared_ptr<int>(new int(raw), [](int* fd) {
    close(*fd);
    delete fd;
  });
  const off_t size = lseek(raw, 0, SEEK_END);
  unsigned char length[8];
  if (size < 8 || pread(raw, length, 8, 0) != 8) return Bad(path, "shorter than 8 bytes");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | length[i];
  constexpr uint64_t kMaxHeader = 100 << 20;  // as the safetensors reference limits it
  if (n == 0 || n > kMaxHeader || n > static_cast<uint64_t>(size) - 8) {
    return Bad(path, absl::StrCat("header length ", n, " in a file of ", size, " bytes"));
  }
  std::string header(n, '\0');
  if (pread(raw, header.data(), n, 8) != static_cast<ssize_t>(n)) {
    return Bad(path, "cannot read the header");
  }
  google::protobuf::Struct json;
  if (!google::protobuf::util::JsonStringToMessage(header, &json).ok()) {
    return Bad(path, "the header is not a JSON object");
  }
  const int64_t data_start = 8 + static_cast<int64_t>(n);
  const int64_t data_bytes = static_cast<int64_t>(size) - data_start;
  for (const auto& [name, value] : json.fields()) {
    if (name == "__metadata__") continue;
    ASSIGN_OR_RETURN(f.tensors_[name], ParseTensor(path, name, value, data_start, data_bytes));
  }
  auto meta = json.fields().find("__metadata__");
  if (meta == json.fields().end() ||
      meta->second.kind_case() != google::protobuf::Value::kStructValue) {
    return Bad(path, "no __metadata__");
  }
  const google::protobuf::Struct& m = meta->second.struct_value();
  int64_t server = 0;
  if (!MetadataNumber(m, "clock", &f.clock_) || !MetadataNumber(m, "server", &server) ||
      server < 0 || server > INT32_MAX) {
    return Bad(path, "__metadata__ lacks a clock or a server");
  }
  f.server_ = static_cast<int>(server);
  auto opt = m.fields().find("optimizer");
  if (opt != m.fields().end()) f.optimizer_ = opt->second.string_value();
  for (const auto& [key, value] : m.fields()) {
    if (value.kind_case() == google::protobuf::Value::kStringValue) {
      f.metadata_[key] = value.string_value();
    }
    int64_t steps;
    if (key.rfind("steps/", 0) == 0 && MetadataNumber(m, key, &steps)) {
      f.steps_[key.substr(6)] = steps;
    }
  }
  return f;
}

std::vector<std::string> CheckpointFile::chunk_names() const {
  std::vector<std::string> out;
  for (const auto& [name, steps] : steps_) out.push_back(name);
  return out;
}

absl::StatusOr<int64_t> CheckpointFile::Steps(const std::string& name) const {
  auto it = steps_.find(name);
  if (it == steps_.end()) return Bad(path_, absl::StrCat("no step count for ", name));
  return it->second;
}

absl::Status CheckpointFile::Read(const std::string& name, float* out, int64_t n) const {
  return ReadRaw(name, false, out, 0, n, false);
}

absl::Status CheckpointFile::ReadPart(const std::string& name, int64_t first, float* out,
                                      int64_t n) const {
  return ReadRaw(name, false, out, first, n, true);
}

absl::Status CheckpointFile::ReadIds(const std::string& name, uint64_t* out, int64_t n) const {
  return ReadRaw(name, true, out, 0, n, false);
}

absl::StatusOr<int64_t> CheckpointFile::Count(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return Bad(path_, absl::StrCat("no tensor ", name));
  return it->second.floats;
}

absl::StatusOr<int64_t> CheckpointFile::Number(const std::string& key) const {
  auto it = metadata_.find(key);
  int64_t v;
  if (it == metadata_.end() || !absl::SimpleAtoi(it->second, &v)) {
    return Bad(path_, absl::StrCat("__metadata__ has no number ", key));
  }
  return v;
}

std::string CheckpointFile::Text(const std::string& key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? "" : it->second;
}

absl::Status CheckpointFile::ReadRaw(const std::string& name, bool dtype_ids, void* out,
                                     int64_t first, int64_t n, bool part) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return Bad(path_, absl::StrCat("no tensor ", name));
  if (it->second.ids != dtype_ids) {
    return Bad(path_, absl::StrCat("tensor ", name, " is not ", dtype_ids ? "I64" : "F32"));
  }
  if (part ? first < 0 || n < 0 || first > it->second.floats - n : it->second.floats != n) {
    return Bad(path_, absl::StrCat("tensor ", name, " has ", it->second.floats,
                                   " values; this job's has ", n));
  }
  const int64_t size = dtype_ids ? 8 : 4;
  char* p = static_cast<char*>(out);
  int64_t at = it->second.begin + first * size, left = n * size;
  while (left > 0) {
    const ssize_t got = pread(*fd_, p, static_cast<size_t>(left), at);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return Bad(path_, absl::StrCat("cannot read tensor ", name));
    p += got;
    at += got;
    left -= got;
  }
  return absl::OkStatus();
}

}  // namespace pstrain
