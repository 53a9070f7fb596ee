#include "worker/data/idx.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace {

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};

bool ReadFully(gzFile f, void* out, size_t n) {
  uint8_t* p = static_cast<uint8_t*>(out);
  while (n > 0) {
    const unsigned step = static_cast<unsigned>(std::min<size_t>(n, 1u << 30));
    const int got = gzread(f, p, step);
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

}  // namespace

absl::StatusOr<IdxArray> ReadIdx(const std::string& path) {
  // gzopen reads plain files as they are.
  std::unique_ptr<gzFile_s, GzCloser> f(gzopen(path.c_str(), "rb"));
  if (f == nullptr) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open (", std::strerror(errno), ")"));
  }
  uint8_t magic[4];
  if (!ReadFully(f.get(), magic, 4)) return absl::DataLossError(absl::StrCat(path, ": empty or unreadable"));
  if (magic[0] != 0 || magic[1] != 0) {
    return absl::DataLossError(absl::StrCat(path, ": not an IDX file"));
  }
  if (magic[2] != 0x08) {
    return absl::DataLossError(absl::StrCat(path, ": IDX type 0x", absl::Hex(magic[2]),
                                            " is not unsigned bytes"));
  }
  const int rank = magic[3];
  if (rank < 1 || rank > 4) return absl::DataLossError(absl::StrCat(path, ": IDX rank ", rank));
  IdxArray out;
  int64_t total = 1;
  for (int i = 0; i < rank; ++i) {
    uint8_t b[4];
    if (!ReadFully(f.get(), b, 4)) return absl::DataLossError(absl::StrCat(path, ": truncated header"));
    const int64_t d = (int64_t{b[0]} << 24) | (b[1] << 16) | (b[2] << 8) | b[3];
    out.dims.push_back(d);
    total *= d;
    if (total > (int64_t{1} << 32)) {
      return absl::DataLossError(absl::StrCat(path, ": claims more than 4 GiB"));
    }
  }
  out.data.resize(static_cast<size_t>(total));
  if (total > 0 && !ReadFully(f.get(), out.data.data(), out.data.size())) {
    return absl::DataLossError(absl::StrCat(path, ": shorter than its header says (",
                                            total, " bytes of data)"));
  }
  return out;
}

}  // namespace pstrain
