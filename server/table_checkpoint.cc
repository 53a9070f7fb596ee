#include "server/table_checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/checkpoint.h"

namespace pstrain {
namespace {

constexpr int64_t kRowsAtOnce = 4096;  // rows a write or read moves

absl::Status Errno(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

absl::Status WriteAt(int fd, const void* data, int64_t bytes, int64_t at,
                     const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = pwrite(fd, p, static_cast<size_t>(bytes), at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Errno("cannot write", path);
    p += n;
    bytes -= n;
    at += n;
  }
  return absl::OkStatus();
}

// The file's header, padded so the data starts 8-byte aligned.
std::string Header(int server, int64_t clock, const SparseTable& table, int64_t n,
                   int64_t stride) {
  const int64_t ids_bytes = n * 8, rows_bytes = n * stride * 4;
  std::string h = absl::StrCat(
      "{\"__metadata__\":{\"format\":\"pstrain table checkpoint\",\"clock\":\"", clock,
      "\",\"server\":\"", server, "\",\"table\":\"", table.config().name, "\",\"width\":\"",
      table.width(), "\",\"updates\":\"", table.updates(), "\"},\"ids\":{\"dtype\":\"I64\","
      "\"shape\":[", n, "],\"data_offsets\":[0,", ids_bytes, "]},\"rows\":{\"dtype\":\"F32\","
      "\"shape\":[", n, ",", stride, "],\"data_offsets\":[", ids_bytes, ",",
      ids_bytes + rows_bytes, "]}}");
  h.append((8 - h.size() % 8) % 8, ' ');
  return h;
}

// The rows of `table` into fd: ids at ids_at, rows (stride floats) after.
absl::Status WriteRows(int fd, SparseTable& table, int64_t n, int64_t ids_at,
                       const std::string& path) {
  const int64_t stride = table.row_bytes() / 4;
  std::vector<uint64_t> ids;
  ids.reserve(static_cast<size_t>(n));
  std::vector<float> batch;
  int64_t rows_at = ids_at + n * 8;
  auto flush = [&]() -> absl::Status {
    RETURN_IF_ERROR(WriteAt(fd, batch.data(), static_cast<int64_t>(batch.size()) * 4, rows_at,
                            path));
    rows_at += static_cast<int64_t>(batch.size()) * 4;
    batch.clear();
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(table.ForEachRow([&](uint64_t id, const float* row) -> absl::Status {
    ids.push_back(id);
    batch.insert(batch.end(), row, row + stride);
    return batch.size() >= static_cast<size_t>(kRowsAtOnce * stride) ? flush()
                                                                     : absl::OkStatus();
  }));
  RETURN_IF_ERROR(flush());
  if (static_cast<int64_t>(ids.size()) != n) {
    return absl::InternalError(absl::StrCat(path, ": ", ids.size(), " rows for ", n));
  }
  return WriteAt(fd, ids.data(), n * 8, ids_at, path);
}

}  // namespace

absl::Status WriteTableCheckpoint(const std::string& path, int server, int64_t clock,
                                  SparseTable& table) {
  const int64_t n = table.num_rows(), stride = table.row_bytes() / 4;
  const std::string header = Header(server, clock, table, n, stride);
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot create", tmp);
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(header.size() >> (8 * i));
  absl::Status st = WriteAt(fd, length, 8, 0, tmp);
  if (st.ok()) st = WriteAt(fd, header.data(), static_cast<int64_t>(header.size()), 8, tmp);
  if (st.ok()) st = WriteRows(fd, table, n, 8 + static_cast<int64_t>(header.size()), tmp);
  if (st.ok() && fsync(fd) != 0) st = Errno("cannot fsync", tmp);
  close(fd);
  if (st.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) st = Errno("cannot rename", tmp);
  if (!st.ok()) unlink(tmp.c_str());
  return st;
}

absl::Status ReadTableCheckpoint(const std::string& path, SparseTable* table) {
  ASSIGN_OR_RETURN(const CheckpointFile file, CheckpointFile::Open(path));
  auto bad = [&path](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat("table checkpoint ", path, ": ", parts...));
  };
  const int64_t stride = table->row_bytes() / 4;
  if (file.Text("table") != table->config().name) {
    return bad("of table '", file.Text("table"), "', not '", table->config().name, "'");
  }
  ASSIGN_OR_RETURN(const int64_t width, file.Number("width"));
  ASSIGN_OR_RETURN(const int64_t updates, file.Number("updates"));
  ASSIGN_OR_RETURN(const int64_t n, file.Count("ids"));
  ASSIGN_OR_RETURN(const int64_t floats, file.Count("rows"));
  if (width != table->width() || floats != n * stride) {
    return bad("rows of width ", width, " and ", n > 0 ? floats / n : 0,
               " floats with state; this job's table has ", table->width(), " and ", stride);
  }
  std::vector<uint64_t> ids(static_cast<size_t>(n));
  RETURN_IF_ERROR(file.ReadIds("ids", ids.data(), n));
  table->Reset(updates, file.clock());
  std::vector<float> batch;
  for (int64_t first = 0; first < n; first += kRowsAtOnce) {
    const int64_t count = std::min(kRowsAtOnce, n - first);
    batch.resize(static_cast<size_t>(count * stride));
    RETURN_IF_ERROR(file.ReadPart("rows", first * stride, batch.data(), count * stride));
    for (int64_t i = 0; i < count; ++i) {
      RETURN_IF_ERROR(table->Put(ids[first + i], batch.data() + i * stride));
    }
  }
  return absl::OkStatus();
}

}  // namespace pstrain
