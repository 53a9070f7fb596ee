#include "common/top_k_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/simd.h"

namespace pstrain {
namespace {

// flags[i] = |v[i]| >= floor; returns how many.
PSTRAIN_SIMD_CLONES int64_t FlagAtLeast(const float* __restrict v, int64_t n, float floor,
                                        uint8_t* __restrict flags) {
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    flags[i] = std::fabs(v[i]) >= floor;
    count += flags[i];
  }
  return count;
}

// Calls f(i) for each i with flags[i] set, ascending; 8 flags a load, so
// that sparse flags cost little.
template <typename F>
void ForEachFlagged(const uint8_t* flags, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t word;
    std::memcpy(&word, flags + i, 8);
    while (word != 0) {
      const int byte = __builtin_ctzll(word) / 8;
      f(i + byte);
      word &= ~(0xFFull << (8 * byte));
    }
  }
  for (; i < n; ++i) {
    if (flags[i]) f(i);
  }
}

// The k-th largest |v|, found among the values at or above a floor that a
// sample suggests (about 1.5 k of them) -- or, should the sample mislead,
// among all.
float KthMagnitude(const float* v, int64_t n, int64_t k, std::vector<uint8_t>* flags) {
  thread_local std::vector<float> picked;
  picked.clear();
  if (n >= 4096) {
    const int64_t samples = 1024, stride = n / samples;
    for (int64_t i = 0; i < samples; ++i) picked.push_back(std::fabs(v[i * stride]));
    // The sample's value with about 1.5 k / n of the sample above it.
    const int64_t rank = std::min<int64_t>(samples - 1, (3 * k * samples) / (2 * n) + 8);
    std::nth_element(picked.begin(), picked.begin() + rank, picked.end(), std::greater<float>());
    const float floor = picked[rank];
    picked.clear();
    if (FlagAtLeast(v, n, floor, flags->data()) >= k) {
      ForEachFlagged(flags->data(), n, [&](int64_t i) { picked.push_back(std::fabs(v[i])); });
    }
  }
  if (picked.empty()) {
    for (int64_t i = 0; i < n; ++i) picked.push_back(std::fabs(v[i]));
  }
  std::nth_element(picked.begin(), picked.begin() + (k - 1), picked.end(), std::greater<float>());
  return picked[k - 1];
}

}  // namespace

int64_t TopKCodec::Kept(int64_t numel) const {
  if (numel <= 0) return 0;
  const double kept = std::round(static_cast<double>(ratio_) * static_cast<double>(numel));
  return std::clamp<int64_t>(static_cast<int64_t>(kept), 1, numel);
}

void TopKCodec::Encode(int64_t n, float* v, char* out) const {
  const int64_t k = Kept(n);
  thread_local std::vector<uint8_t> flags;
  flags.resize(n);
  const float threshold = KthMagnitude(v, n, k, &flags);
  // Every value above the threshold, then the first ones equal to it.
  const int64_t at_least = FlagAtLeast(v, n, threshold, flags.data());
  int64_t equal = 0;
  ForEachFlagged(flags.data(), n, [&](int64_t i) { equal += std::fabs(v[i]) == threshold; });
  int64_t ties = k - (at_least - equal), kept = 0;
  ForEachFlagged(flags.data(), n, [&](int64_t i) {
    if (std::fabs(v[i]) == threshold && ties-- <= 0) return;
    const uint32_t index = static_cast<uint32_t>(i);
    std::memcpy(out + 4 * kept, &index, 4);
    std::memcpy(out + 4 * (k + kept), &v[i], 4);
    v[i] = 0;
    ++kept;
  });
}

void TopKCodec::EncodeNonFinite(int64_t n, char* out) const {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int64_t k = Kept(n);
  for (int64_t i = 0; i < k; ++i) {
    const uint32_t index = static_cast<uint32_t>(i);
    std::memcpy(out + 4 * i, &index, 4);
    std::memcpy(out + 4 * (k + i), &nan, 4);
  }
}

absl::Status TopKCodec::Decode(const char* bytes, int64_t numel, float* out) const {
  const int64_t k = Kept(numel);
  std::fill(out, out + numel, 0.0f);
  int64_t last = -1;
  for (int64_t i = 0; i < k; ++i) {
    uint32_t index;
    std::memcpy(&index, bytes + 4 * i, 4);
    if (static_cast<int64_t>(index) <= last || index >= numel) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a compressed chunk's index ", index, " is out of order or outside [0, ", numel, ")"));
    }
    last = index;
    std::memcpy(&out[index], bytes + 4 * (k + i), 4);
  }
  return absl::OkStatus();
}

}  // namespace pstrain
