// The worker's decoder of a server's pull reply (the bytes a server, or
// anything posing as one, sends back).
#include <cstdint>
#include <vector>

#include "common/tensor_wire.h"
#include "fuzz/sliced.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstrain;
  const grpc::ByteBuffer buf = Sliced(data, size, size == 0 ? 0 : data[0] % (size + 1));
  SliceReader reader(buf);
  std::vector<PayloadRef> chunks;
  PulledClocks clocks;
  if (!DecodePullResponse(reader, &chunks, &clocks).ok()) return 0;
  // Every payload it located lies inside the message and reads back.
  std::vector<char> out;
  for (const PayloadRef& c : chunks) {
    if (c.offset + c.bytes > buf.Length()) __builtin_trap();
    out.resize(c.bytes);
    reader.Seek(c.offset);
    if (!reader.Copy(c.bytes, out.data())) __builtin_trap();
  }
  return 0;
}
