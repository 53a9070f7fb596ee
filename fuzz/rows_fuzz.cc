// The servers' and workers' reader of the sparse tables' messages
// (common/row_wire.h: a PushRowsRequest as a worker, or anything posing as
// one, sends it; a PullRowsResponse likewise), over bytes cut into two
// slices anywhere.
#include <cstdint>
#include <string>
#include <vector>

#include "common/row_wire.h"
#include "fuzz/sliced.h"
#include "proto/ps.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstrain;
  const grpc::ByteBuffer buf = Sliced(data, size, size == 0 ? 0 : data[0] % (size + 1));
  PushRowsRequest head;
  size_t declared = 0, read = 0;
  const absl::Status st = ReadWithPayload(
      buf, &head, PushRowsRequest::kGradsFieldNumber,
      [&](size_t bytes, const ReadPayload& read_payload) -> absl::Status {
        declared = bytes;
        if (bytes > size) return absl::InvalidArgumentError("longer than the message");
        std::string to(bytes, '\0');
        for (size_t at = 0; at < bytes; at += 7) {  // in pieces, as rows are read
          const size_t n = bytes - at < 7 ? bytes - at : 7;
          if (!read_payload(to.data() + at, n)) return absl::InvalidArgumentError("cut short");
          read += n;
        }
        return absl::OkStatus();
      });
  if (st.ok() && (read != declared || declared > size)) __builtin_trap();
  return 0;
}
