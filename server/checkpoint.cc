#include "server/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace {

absl::Status Errno(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

absl::Status WriteAt(int fd, const void* data, int64_t bytes, int64_t at, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = pwrite(fd, p, static_cast<size_t>(bytes), at);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("cannot write", path);
    }
    p += n;
    at += n;
    bytes -= n;
  }
  return absl::OkStatus();
}

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

// Writes `text` to `path` through a temporary file, fsynced and renamed.
absl::Status WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot create", tmp);
  absl::Status st = WriteAt(fd, text.data(), static_cast<int64_t>(text.size()), 0, tmp);
  if (st.ok() && fsync(fd) != 0) st = Errno("cannot fsync", tmp);
  close(fd);
  if (st.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) st = Errno("cannot rename", tmp);
  return st;
}

}  // namespace

CheckpointWriter::CheckpointWriter(std::string dir, int server_id, std::string optimizer,
                                   std::vector<Chunk> chunks)
    : dir_(std::move(dir)), server_id_(server_id), optimizer_(std::move(optimizer)),
      chunks_(std::move(chunks)) {
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
                      c.state_floats, "],\"data_offsets\":[", s, ",", s + c.state_floats * 4,
                      "]}");
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
      open.path = absl::StrCat(dir_, "/server-", server_id_, "-clock-", clock, ".safetensors");
      open.tmp = open.path + ".tmp";
      open.fd = ::open(open.tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (open.fd < 0) {
        const absl::Status st = Errno("cannot create", open.tmp);
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
  absl::Status st = WriteAt(fd, weights, c.weight_floats * 4, at, tmp);
  if (st.ok() && c.state_floats > 0) {
    st = WriteAt(fd, state, c.state_floats * 4, at + c.weight_floats * 4, tmp);
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
  absl::Status st = WriteAt(open.fd, length, 8, 0, open.tmp);
  if (st.ok()) st = WriteAt(open.fd, header.data(), static_cast<int64_t>(n), 8, open.tmp);
  if (st.ok() && fsync(open.fd) != 0) st = Errno("cannot fsync", open.tmp);
  close(open.fd);
  if (st.ok() && std::rename(open.tmp.c_str(), open.path.c_str()) != 0) {
    st = Errno("cannot rename", open.tmp);
  }
  if (!st.ok()) {
    unlink(open.tmp.c_str());
    return st;
  }
  const std::string name = std::filesystem::path(open.path).filename().string();
  return WriteFileAtomically(absl::StrCat(dir_, "/server-", server_id_, ".latest"), name + "\n");
}

}  // namespace pstrain
