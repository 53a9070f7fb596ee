// Push and pull messages on the wire without protobuf copies of their
// payloads.
//
// The bytes are exactly protobuf's encoding of pstrain.PushRequest and
// pstrain.PullResponse (proto/ps.proto), so any protobuf client can talk to
// the servers; but the payloads are laid into grpc::ByteBuffer slices
// directly: a push's fp32 payloads are referenced where the worker holds
// them, and a pull's payloads are written once, straight from the store into
// the reply's slices. Readers copy a payload once, from the received slices
// into its destination.
#ifndef PSTRAIN_COMMON_TENSOR_WIRE_H_
#define PSTRAIN_COMMON_TENSOR_WIRE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "common/pulled_clocks.h"
#include "proto/job.pb.h"

namespace pstrain {

// Reads a ByteBuffer's bytes in order, across its slices. Not thread-safe.
class SliceReader {
 public:
  explicit SliceReader(const grpc::ByteBuffer& buffer);

  size_t size() const { return size_; }
  size_t position() const { return starts_[slice_] + offset_; }
  size_t remaining() const { return size_ - position(); }
  // Moves to absolute byte `position` (<= size()).
  void Seek(size_t position);
  // Each returns false, consuming an unspecified amount, when the buffer ends
  // early or the encoding is malformed.
  bool ReadVarint(uint64_t* value);
  bool ReadFixed32(uint32_t* value);
  bool Skip(size_t n);
  bool Copy(size_t n, char* dst);
  // The `n` bytes at absolute `position` when they lie in one slice (valid
  // while the buffer lives), else null.
  const char* Contiguous(size_t position, size_t n);

 private:
  std::vector<grpc::Slice> slices_;
  std::vector<size_t> starts_;  // byte offset of each slice; one past the last
  size_t size_ = 0;
  size_t slice_ = 0;   // current slice
  size_t offset_ = 0;  // within it
};

// A chunk's payload inside a received message.
struct PayloadRef {
  int32_t chunk = -1;
  size_t offset = 0;  // absolute position of the first payload byte
  size_t bytes = 0;
};

struct PushHeader {
  int32_t worker_id = 0;
  int64_t clock = 0;
  int32_t num_samples = 0;
  DType dtype = FP32;
  float grad_norm = 0;
  int64_t generation = 0;
  int64_t checkpoint_clock = 0;
  bool apply_at_once = false;
  bool initial_values = false;  // PushRequest.initial_values
  // PushRequest.shm_segment: non-zero, the payloads are in that segment and
  // EncodePush writes only the chunk ids.
  uint64_t shm_segment = 0;
  // PushRequest.hyper, serialized (an OptimizerSpec); empty: none.
  std::string hyper;
  // PushRequest.compression, serialized (a GradCompression); empty: none.
  std::string compression;
  // PushRequest.without_gradient: chunks with no gradient this clock.
  std::vector<int32_t> without_gradient;
};

// One chunk of a push: `numel` fp32 values at `values`, or, compressed
// (common/grad_codec.h), the codec's `compressed_bytes` bytes at `compressed`.
struct PushChunk {
  int32_t chunk = 0;
  const float* values = nullptr;
  int64_t numel = 0;
  const char* compressed = nullptr;
  int64_t compressed_bytes = 0;
};

// Encodes a PushRequest. fp32 and compressed payloads are referenced, not
// copied: `values` and `compressed` must stay valid until the call that sends
// the buffer has completed; 16-bit payloads are converted into new slices.
grpc::ByteBuffer EncodePush(const PushHeader& header, const std::vector<PushChunk>& chunks);
// At most the bytes EncodePush produces for one chunk of `numel` values.
int64_t PushChunkWireBytes(DType dtype, int64_t numel);

// Parses a PushRequest's fields and locates its payloads (not read yet).
// INVALID_ARGUMENT when malformed.
absl::Status DecodePush(SliceReader& reader, PushHeader* header, std::vector<PayloadRef>* chunks);

// A compressed pull's views per chunk (PullResponse.views and .bases),
// and the chunks whose view the server does not keep (.views_unknown).
struct PulledViews {
  std::vector<uint64_t> views, bases;
  std::vector<uint64_t> unknown;
};

// Encodes a PullResponse of the given chunks; fill(i, dst) writes chunk i's
// payload_bytes[i] bytes at dst (any alignment). `clocks` and `views`
// (null: none) are read after every fill, so a fill may compute them.
grpc::ByteBuffer EncodePullResponse(const std::vector<int32_t>& chunk_ids,
                                    const std::vector<int64_t>& payload_bytes,
                                    absl::FunctionRef<void(size_t, char*)> fill,
                                    const PulledClocks& clocks,
                                    const PulledViews* views = nullptr);
// Parses a PullResponse and locates its payloads. INVALID_ARGUMENT when
// malformed.
absl::Status DecodePullResponse(SliceReader& reader, std::vector<PayloadRef>* chunks,
                                PulledClocks* clocks, PulledViews* views = nullptr);

// Parses any small message from a ByteBuffer (copies it).
bool ParseSmall(const grpc::ByteBuffer& buffer, google::protobuf::MessageLite* message);
grpc::ByteBuffer SerializeSmall(const google::protobuf::MessageLite& message);
// A small buffer's bytes in one string, and back (the shared-memory
// doorbell's frames carry requests and replies as bytes: common/shm.h).
std::string FlattenSmall(const grpc::ByteBuffer& buffer);
grpc::ByteBuffer BufferOf(std::string bytes);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_TENSOR_WIRE_H_
