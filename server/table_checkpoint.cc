#include "server/table_checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <utility>
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
  std::string h =
      absl::StrCat("{\"__metadata__\":{\"format\":\"pstrain table checkpoint\",\"clock\":\"", clock,
                   "\",\"server\":\"", server, "\",\"table\":\"", table.config().name,
                   "\",\"width\":\"", table.width(), "\",\"updates\":\"", table.updates(), "\"}");
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
    RETURN_IF_ERROR(
        WriteFileAt(fd, batch.data(), static_cast<int64_t>(batch.size()) * 4, rows_at, path));
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

namespace {

// One server's file of a table and clock, checked and its ids read.
struct PartFile {
  CheckpointFile file;
  std::string path;
  int64_t updates = 0;
  std::vector<uint64_t> ids;
  std::vector<int64_t> touched;
};

absl::StatusOr<PartFile> OpenPart(const TablePart& part, int64_t clock, const SparseTable& table) {
  const std::string& path = part.path;
  ASSIGN_OR_RETURN(CheckpointFile file, CheckpointFile::Open(path));
  auto bad = [&path](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat("table checkpoint ", path, ": ", parts...));
  };
  if (file.server() != part.server || file.clock() != clock) {
    return bad("of server ", file.server(), " at clock ", file.clock(), ", not server ",
               part.server, " at ", clock);
  }
  const int64_t stride = table.row_bytes() / 4;
  if (file.Text("table") != table.config().name) {
    return bad("of table '", file.Text("table"), "', not '", table.config().name, "'");
  }
  ASSIGN_OR_RETURN(const int64_t width, file.Number("width"));
  ASSIGN_OR_RETURN(const int64_t updates, file.Number("updates"));
  ASSIGN_OR_RETURN(const int64_t n, file.Count("ids"));
  ASSIGN_OR_RETURN(const int64_t floats, file.Count("rows"));
  if (width != table.width() || floats != n * stride) {
    return bad("rows of width ", width, " and ", n > 0 ? floats / n : 0,
               " floats with state; this job's table has ", table.width(), " and ", stride);
  }
  if (updates < 0) return bad("a negative update count");
  PartFile out{std::move(file), path, updates, std::vector<uint64_t>(static_cast<size_t>(n)),
               std::vector<int64_t>(static_cast<size_t>(n))};
  RETURN_IF_ERROR(out.file.ReadIds("ids", out.ids.data(), n));
  RETURN_IF_ERROR(out.file.ReadIds("touched", reinterpret_cast<uint64_t*>(out.touched.data()), n));
  return out;
}

// The admission counts of `table` from `file`, read before anything changes.
absl::StatusOr<std::vector<uint8_t>> ReadSeen(const PartFile& part, const SparseTable& table) {
  std::vector<uint8_t> seen;
  if (table.seen() == nullptr) return seen;
  seen.resize(static_cast<size_t>(table.seen()->bytes()));
  RETURN_IF_ERROR(part.file.ReadIds("seen", reinterpret_cast<uint64_t*>(seen.data()),
                                    static_cast<int64_t>(seen.size()) / 8));
  return seen;
}

}  // namespace

absl::Status ReadTableCheckpoint(const std::string& path, int server, int64_t clock,
                                 SparseTable* table) {
  return ReadTableCheckpoints({{server, path}}, clock, table, nullptr);
}

absl::Status ReadTableCheckpoints(const std::vector<TablePart>& parts, int64_t clock,
                                  SparseTable* table,
                                  const std::function<bool(uint64_t id)>& keep) {
  if (parts.empty()) return absl::InvalidArgumentError("no table checkpoint to read");
  std::vector<PartFile> files;
  absl::flat_hash_set<uint64_t> distinct;
  for (const TablePart& part : parts) {
    ASSIGN_OR_RETURN(PartFile f, OpenPart(part, clock, *table));
    if (!files.empty() && f.updates != files[0].updates) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table checkpoints ", files[0].path, " and ", f.path, " disagree on the update count (",
          files[0].updates, ", ", f.updates, "): not one checkpoint"));
    }
    for (uint64_t id : f.ids) {
      if (!distinct.insert(id).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("table checkpoint ", f.path, ": an id is there twice, or in two files"));
      }
    }
    files.push_back(std::move(f));
  }
  if (table->seen() != nullptr && files.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table '", table->config().name,
        "' admits rows by counts that are not kept by row: its parts cannot be merged"));
  }
  ASSIGN_OR_RETURN(const std::vector<uint8_t> seen, ReadSeen(files[0], *table));
  // Checked: from here only the table's own spill file can fail.
  table->Reset(files[0].updates, clock);
  if (!seen.empty()) std::copy(seen.begin(), seen.end(), table->seen()->mutable_data());
  const int64_t stride = table->row_bytes() / 4;
  std::vector<float> batch;
  for (const PartFile& f : files) {
    const int64_t n = static_cast<int64_t>(f.ids.size());
    for (int64_t first = 0; first < n; first += kRowsAtOnce) {
      const int64_t count = std::min(kRowsAtOnce, n - first);
      batch.resize(static_cast<size_t>(count * stride));
      RETURN_IF_ERROR(f.file.ReadPart("rows", first * stride, batch.data(), count * stride));
      for (int64_t i = 0; i < count; ++i) {
        const uint64_t id = f.ids[first + i];
        if (keep != nullptr && !keep(id)) continue;
        RETURN_IF_ERROR(table->Put(id, batch.data() + i * stride, f.touched[first + i]));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace pstrain
