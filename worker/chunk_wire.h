// How a worker's chunks travel: the worker's end of the chunk encoding, and
// where a payload lies. A chunk's payload is its values in the wire dtype
// (fp32, bf16, fp16) or, for a chunk the job's codec compresses, a push's
// values encoded with their error feedback (worker/error_feedback.h) and a
// pull's change from the view this worker holds (worker/held_views.h); it
// lies in the message or in the chunk's slot of the server's shared-memory
// segment (PulledPayloads). PsClient composes the two with its calls;
// neither knows servers, routes or retries.
#ifndef PSTRAIN_WORKER_CHUNK_WIRE_H_
#define PSTRAIN_WORKER_CHUNK_WIRE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "common/partition.h"
#include "common/shm_link.h"
#include "common/tensor_wire.h"
#include "proto/job.pb.h"
#include "proto/ps.pb.h"
#include "worker/error_feedback.h"
#include "worker/held_views.h"

namespace pstrain {

// Where a pull reply's payloads lie: in the message, at each PayloadRef's
// offset, or in the chunks' pull slots of a shared-memory segment.
class PulledPayloads {
 public:
  // `reader` reads the reply; `link`: the segment (null: the message).
  PulledPayloads(SliceReader* reader, const ShmLink* link) : reader_(reader), link_(link) {}

  bool in_segment() const { return link_ != nullptr; }
  // The `n` payload bytes of `ref` in one piece (the slot, or a copy of
  // the message's bytes), valid until the next call.
  const char* Bytes(const PayloadRef& ref, size_t n);
  // Copies them to `dst`.
  void CopyTo(const PayloadRef& ref, size_t n, char* dst);

 private:
  SliceReader* const reader_;
  const ShmLink* const link_;
  std::vector<char> staging_;
};

class ChunkWire {
 public:
  // `feedback` (compressed pushes) and `held_views` (compressed pulls;
  // null: dense) outlive the wire; chunks of parameters [first_param, ...)
  // are this worker's buffers 0, 1, ...
  ChunkWire(const Partition* partition, int first_param, DType dtype, GradCompression compression,
            ErrorFeedback* feedback, HeldViews* held_views, int64_t generation)
      : partition_(partition),
        first_param_(first_param),
        dtype_(dtype),
        compression_(std::move(compression)),
        feedback_(feedback),
        held_views_(held_views),
        generation_(generation) {}

  DType dtype() const { return dtype_; }
  // Whether pulls go compressed (held views, fp32 on the wire).
  bool PullsCompressed() const { return held_views_ != nullptr && dtype_ == FP32; }
  // Whether a push of `header` goes compressed (initial values go dense).
  bool Compressing(const PushHeader& header) const {
    return compression_.codec() != GradCompression::NONE && feedback_ != nullptr &&
           !header.initial_values;
  }
  const GradCompression& compression() const { return compression_; }

  // A pull's request names the views it holds of its chunks (compressed
  // pulls), as of this attempt.
  void NameHeldViews(PullRequest* req) const;
  // A pull reply's views: `unknown` are views the server does not keep; the
  // others must match `batch` one for one.
  absl::Status CheckViews(const std::vector<int32_t>& batch, const std::vector<PayloadRef>& refs,
                          const PulledViews& views) const;
  // Reply entry k (chunk ref.chunk, asked for as `asked`) into `dst` (the
  // chunk's place in its weights): checks its size, decodes or applies
  // its change; returns its payload bytes.
  absl::StatusOr<size_t> TakePulled(const PayloadRef& ref, int32_t asked, const PulledViews& views,
                                    size_t k, PulledPayloads& at, float* dst) const;

  // A push call's chunks of `batch` into *chunks (their compressed bytes,
  // where the job compresses them, into *compressed, else empty); `at`,
  // per parameter (null or empty: none), where its gradient lies instead
  // of `grads`. Returns their payload bytes.
  int64_t EncodePush(const PushHeader& header, const std::vector<int32_t>& batch,
                     const std::vector<std::vector<float>>& grads,
                     const std::vector<const float*>* at, std::vector<PushChunk>* chunks,
                     std::vector<std::vector<char>>* compressed) const;
  // A push's payloads into `link`'s push slots.
  static void WriteToSlots(DType dtype, const std::vector<PushChunk>& chunks, const ShmLink& link);

 private:
  const Partition* const partition_;
  const int first_param_;
  const DType dtype_;
  const GradCompression compression_;
  ErrorFeedback* const feedback_;
  HeldViews* const held_views_;
  const int64_t generation_;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_CHUNK_WIRE_H_
