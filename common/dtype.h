// Wire dtypes: fp32, bf16 and fp16 encodings of fp32 values, with the
// conversions of common/half.h.
#ifndef PSTRAIN_COMMON_DTYPE_H_
#define PSTRAIN_COMMON_DTYPE_H_

#include <cstdint>
#include <string>

#include "common/half.h"
#include "proto/job.pb.h"

namespace pstrain {

// Bytes per element on the wire.
int DTypeSize(DType dtype);
std::string DTypeName(DType dtype);  // "fp32", "bf16", "fp16" (common/enum_names.h)
// Parses "fp32", "bf16" or "fp16"; false for anything else.
bool ParseDType(const std::string& name, DType* dtype);

// `n` values from `src` into `dst` (n * DTypeSize bytes, any alignment).
void EncodeFloats(DType dtype, const float* src, int64_t n, char* dst);
// n * DTypeSize bytes from `src` (any alignment) into `n` floats.
void DecodeFloats(DType dtype, const char* src, int64_t n, float* dst);

// True when no value is NaN or Inf.
bool AllFinite(const float* v, int64_t n);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_DTYPE_H_
