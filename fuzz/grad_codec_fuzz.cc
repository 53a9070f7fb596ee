// The compressed-push codecs (common/grad_codec.h) on any bytes: the
// first six choose the codec, its block or ratio and the chunk's size, the
// rest is the payload to decode -- refused or decoded, never a crash or a
// read past it -- and, read as floats, a gradient to encode with error
// feedback, whose decoding plus the new residual must give it back (when
// it is finite): exactly, but for SIGN's rounding.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/grad_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstrain;
  if (size < 6) return 0;
  GradCompression spec;
  constexpr GradCompression::Codec kCodecs[] = {GradCompression::SIGN, GradCompression::TOP_K,
                                                GradCompression::INT8, GradCompression::INT4};
  spec.set_codec(kCodecs[data[0] % 4]);
  spec.set_block(8 * (1 + data[1] % 64));
  spec.set_ratio(static_cast<float>(1 + data[2] % 127) / 256.0f);
  spec.set_min_numel(1);
  const int64_t numel = 1 + (data[3] | (data[4] << 8)) % 4096;
  const char* payload = reinterpret_cast<const char*>(data + 6);
  const int64_t bytes = static_cast<int64_t>(size - 6);
  if (!CheckCompression(spec).ok()) __builtin_trap();  // every choice above is in range
  // Decoding: into exactly numel values.
  std::vector<float> out(numel);
  const absl::Status decoded = Decode(spec, payload, bytes, numel, out.data());
  if (!decoded.ok() && decoded.code() != absl::StatusCode::kInvalidArgument) __builtin_trap();
  if (decoded.ok() && bytes != EncodedBytes(spec, numel)) __builtin_trap();
  // Encoding the payload's floats (as many as there are, at most numel).
  const int64_t n = std::min<int64_t>(numel, bytes / 4);
  if (n == 0) return 0;
  std::vector<float> g(n), residual(n, 0.0f), back(n);
  std::memcpy(g.data(), payload, 4 * n);
  std::vector<char> encoded(EncodedBytes(spec, n));
  EncodeWithFeedback(spec, g.data(), n, residual.data(), encoded.data());
  if (!Decode(spec, encoded.data(), static_cast<int64_t>(encoded.size()), n, back.data()).ok()) {
    __builtin_trap();  // our own encoding
  }
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(g[i])) return 0;  // sent as non-finite, the residual kept
  }
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(back[i]) || !std::isfinite(residual[i])) __builtin_trap();
    // TOP_K, INT8, INT4: exact in float; SIGN: to a rounding.
    if (spec.codec() != GradCompression::SIGN && back[i] + residual[i] != g[i]) __builtin_trap();
    const double want = g[i], got = static_cast<double>(back[i]) + residual[i];
    if (std::fabs(got - want) > 1e-6 * std::fabs(want) + 1e-30 &&
        std::fabs(got - want) > 1e-6 * std::fabs(back[i])) {
      __builtin_trap();  // error feedback lost part of the gradient
    }
  }
  return 0;
}
