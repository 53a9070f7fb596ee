// Gradient compression of pushes (JobSpec.compression, docs/compression.md):
// the job's settings, whether a chunk goes compressed, and a chunk's
// encoding with the worker's error feedback and its decoding -- through
// the codec's class (common/chunk_codec.h: one class a codec, each header
// giving its layout). A chunk of n values encodes into exactly
// EncodedBytes(spec, n) bytes, so a server knows every payload's size from
// the chunk's size alone, and a payload of another size is malformed.
//
// Error feedback (Seide et al. 2014; Karimireddy et al., "Error Feedback
// Fixes SignSGD", 2019): the worker keeps per chunk the residual r of its
// last compression. It compresses v = g + r and keeps r' = v - decode(v)
// for the next clock, so that over any run of clocks the decoded gradients
// plus the last residual sum to the true gradients (exactly for TOP_K, INT8
// and INT4, to within a rounding of each value for SIGN).
#ifndef PSTRAIN_COMMON_GRAD_CODEC_H_
#define PSTRAIN_COMMON_GRAD_CODEC_H_

#include <cstdint>

#include "absl/status/status.h"
#include "proto/job.pb.h"

namespace pstrain {

// `spec` with every default filled in (proto/job.proto); codec NONE stays
// NONE.
GradCompression WithCompressionDefaults(const GradCompression& spec);
// INVALID_ARGUMENT naming the field when `spec` (defaults filled in) is out
// of its range.
absl::Status CheckCompression(const GradCompression& spec);

// Whether the job's pulls go compressed too (a codec set and `pulls`).
bool CompressesPulls(const GradCompression& spec);
// Whether a chunk of `numel` values goes compressed under `spec` (defaults
// filled in): a codec is set, the chunk has at least min_numel values (and
// at most 2^32 - 1), and its encoding takes fewer bytes than its fp32
// values. Workers and servers decide by it alike.
bool Compresses(const GradCompression& spec, int64_t numel);
// TOP_K: the values a chunk of `numel` keeps, ratio x numel rounded (at least 1).
int64_t KeptValues(const GradCompression& spec, int64_t numel);
// The bytes a compressed chunk of `numel` values encodes into (codec NONE:
// its fp32 values').
int64_t EncodedBytes(const GradCompression& spec, int64_t numel);

// Encodes v = values + residual (n of each; `spec` names a codec: a chunk
// Compresses) into EncodedBytes(spec, n) bytes at `out` (any alignment) and leaves in `residual`
// what the encoding left out, v - decode(out). `residual` may hold anything finite to begin with
// (zeros on a chunk's first push). A v with a NaN or an Inf is encoded so that it decodes to NaN,
// and `residual` is left as it was.
void EncodeWithFeedback(const GradCompression& spec, const float* values, int64_t n,
                        float* residual, char* out);

// Decodes `bytes` (`size` of them, any alignment) into the chunk's `numel`
// values at `out`. INVALID_ARGUMENT when the size is not EncodedBytes, or
// the bytes are ones the codec never writes (ChunkCodec::Decode), or the
// spec names no codec; `out` is then unspecified.
absl::Status Decode(const GradCompression& spec, const char* bytes, int64_t size, int64_t numel,
                    float* out);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_GRAD_CODEC_H_
