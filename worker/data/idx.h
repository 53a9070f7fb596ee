// Reader for the IDX format of (Fashion-)MNIST, gzipped or plain.
#ifndef PSTRAIN_WORKER_DATA_IDX_H_
#define PSTRAIN_WORKER_DATA_IDX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pstrain {

// An unsigned-byte IDX array: dims[0] items of dims[1] * dims[2] ... bytes.
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
};

// Reads an IDX file of unsigned bytes (type 0x08). NOT_FOUND if the file
// cannot be opened, DATA_LOSS for a bad header, other types, or a file
// shorter than its header says. Refuses arrays over 4 GiB.
absl::StatusOr<IdxArray> ReadIdx(const std::string& path);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_DATA_IDX_H_
