// A fuzz input's bytes as gRPC receives a message: in slices, here two cut
// at `cut` (an input-chosen point), so that decoders meet values split
// across slices.
#ifndef PSTRAIN_FUZZ_SLICED_H_
#define PSTRAIN_FUZZ_SLICED_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include <grpcpp/support/byte_buffer.h>

namespace pstrain {

inline grpc::ByteBuffer Sliced(const uint8_t* data, size_t size, size_t cut) {
  std::vector<grpc::Slice> slices;
  if (cut > 0) slices.emplace_back(data, cut);
  if (cut < size) slices.emplace_back(data + cut, size - cut);
  return grpc::ByteBuffer(slices.data(), slices.size());
}

}  // namespace pstrain

#endif  // PSTRAIN_FUZZ_SLICED_H_
