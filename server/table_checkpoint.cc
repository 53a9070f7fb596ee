#include "server/table_checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/checkpoint.h"

namespace pstrain {
namespace {

constexpr int64_t kRowsAtOnce = 4096;  // rows a write or read moves

// The file's layout: ids, rows, touched clocks, the admission counts.
struct Layout {
  int64_t n = 0, stride = 0, seen_bytes = 0;
  int64_t ids_at() const { return 0; }
  int64_t rows_at() const { return n * 8; }
  int64_t touched_at() const { return rows_at() + n * stride * 4; }
  int64_t seen_at() const { return touched_at() + n * 8; }
  int64_t end() const { return seen_at() + seen_bytes; }
};

std::string Tensor(const char* name, const char* dtype, const std::string& shape, int64_t begin,
                   int64_t end) {
  return absl::StrCat(",\"", name, "\":{\"dtype\":\"", dtype, "\",\"shape\":[", shape,
                      "],\"data_offsets\":[", begin, ",", end, "]}");
}

// The file's header, padded so the data starts 8-byte aligned.
std::string Header(int server, int64_t clock, const SparseTable& table, const Layout& at) {
  std::string h = absl::StrCat(
      "{\"__metadata__\":{\"format\":\"pstrain table checkpoint\",\"clock\":\"", clock,
      "\",\"server\":\"", server, "\",\"table\":\"", table.config().name, "\",\"width\":\"",
      table.width(), "\",\"updates\":\"", table.updates(), "\"}");
  h += Tensor("ids", "I64", absl::StrCat(at.n), at.ids_at(), at.rows_at());
  h += Tensor("rows", "F32", absl::StrCat(at.n, ",", at.stride), at.rows_at(), at.touched_at());
  h += Tensor("touched", "I64", absl::StrCat(at.n), at.touched_at(), at.seen_at());
  if (at.seen_bytes > 0) {
    h += Tensor("seen", "I64", absl::StrCat(at.seen_bytes / 8), at.seen_at(), at.end());
  }
  h += "}";
  h.append((8 - h.size() % 8) % 8, ' ');
  return h;
}

// The rows of `table` into fd at `data` (the data's start in the file).
absl::Status WriteRows(int fd, SparseTable& table, const Layout& at, int64_t data,
                       const std::string& path) {
  std::vector<uint64_t> ids;
  std::vector<int64_t> touched;
  ids.reserve(static_cast<size_t>(at.n));
  touched.reserve(static_cast<size_t>(at.n));
  std::vector<float> batch;
  int64_t rows_at = data + at.rows_at();
  auto flush = [&]() -> absl::Status {
    RETURN_IF_ERROR(WriteFileAt(fd, batch.data(), static_cast<int64_t>(batch.size()) * 4, rows_at,
                            path));
    rows_at += static_cast<int64_t>(batch.size()) * 4;
    batch.clear();
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(
      table.ForEachRow([&](uint64_t id, const float* row, int64_t when) -> absl::Status {
        ids.push_back(id);
        touched.push_back(when);
        batch.insert(batch.end(), row, row + at.stride);
        return batch.size() >= static_cast<size_t>(kRowsAtOnce * at.stride) ? flush()
                                                                            : absl::OkStatus();
      }));
  RETURN_IF_ERROR(flush());
  if (static_cast<int64_t>(ids.size()) != at.n) {
    return absl::InternalError(absl::StrCat(path, ": ", ids.size(), " rows for ", at.n));
  }
  RETURN_IF_ERROR(WriteFileAt(fd, ids.data(), at.n * 8, data + at.ids_at(), path));
  RETURN_IF_ERROR(WriteFileAt(fd, touched.data(), at.n * 8, data + at.touched_at(), path));
  if (at.seen_bytes == 0) return absl::OkStatus();
  return WriteFileAt(fd, table.seen()->data(), at.seen_bytes, data + at.seen_at(), path);
}

}  // namespace

absl::Status WriteTableCheckpoint(const std::string& path, int server, int64_t clock,
                                  SparseTable& table) {
  Layout at;
  at.n = table.num_rows();
  at.stride = table.row_bytes() / 4;
  at.seen_bytes = table.seen() != nullptr ? table.seen()->bytes() : 0;
  const std::string header = Header(server, clock, table, at);
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return FileError("cannot create", tmp);
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(header.size() >> (8 * i));
  absl::Status st = WriteFileAt(fd, length, 8, 0, tmp);
  if (st.ok()) st = WriteFileAt(fd, header.data(), static_cast<int64_t>(header.size()), 8, tmp);
  if (st.ok()) st = WriteRows(fd, table, at, 8 + static_cast<int64_t>(header.size()), tmp);
  if (st.ok() && fsync(fd) != 0) st = FileError("cannot fsync", tmp);
  close(fd);
  if (st.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) st = FileError("cannot rename", tmp);
  if (!st.ok()) unlink(tmp.c_str());
  return st;
}

absl::Status ReadTableCheckpoint(const std::string& path, int server, int64_t clock,
                                 SparseTable* table) {
  ASSIGN_OR_RETURN(const CheckpointFile file, CheckpointFile::Open(path));
  auto bad = [&path](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat("table checkpoint ", path, ": ", parts...));
  };
  if (file.server() != server || file.clock() != clock) {
    return bad("of server ", file.server(), " at clock ", file.clock(), ", not server ", server,
               " at ", clock);
  }
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
  std::vector<int64_t> touched(static_cast<size_t>(n));
  RETURN_IF_ERROR(file.ReadIds("ids", ids.data(), n));
  RETURN_IF_ERROR(file.ReadIds("touched", reinterpret_cast<uint64_t*>(touched.data()), n));
  absl::flat_hash_set<uint64_t> distinct(ids.begin(), ids.end());
  if (static_cast<int64_t>(distinct.size()) != n) return bad("an id is there twice");
  std::vector<uint8_t> seen;
  if (table->seen() != nullptr) {
    seen.resize(static_cast<size_t>(table->seen()->bytes()));
    RETURN_IF_ERROR(file.ReadIds("seen", reinterpret_cast<uint64_t*>(seen.data()),
                                 static_cast<int64_t>(seen.size()) / 8));
  }
  if (updates < 0) return bad("a negative update count");
  // Checked: from here only the table's own spill file can fail.
  table->Reset(updates, clock);
  if (!seen.empty()) std::copy(seen.begin(), seen.end(), table->seen()->mutable_data());
  std::vector<float> batch;
  for (int64_t first = 0; first < n; first += kRowsAtOnce) {
    const int64_t count = std::min(kRowsAtOnce, n - first);
    batch.resize(static_cast<size_t>(count * stride));
    RETURN_IF_ERROR(file.ReadPart("rows", first * stride, batch.data(), count * stride));
    for (int64_t i = 0; i < count; ++i) {
      RETURN_IF_ERROR(
          table->Put(ids[first + i], batch.data() + i * stride, touched[first + i]));
    }
  }
  return absl::OkStatus();
}

}  // namespace pstrain
