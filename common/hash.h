// Small hashes that are the same on every build (std::hash is not), for
// values derived from seeds and names: initial weights, a row's start, a
// row's server.
#ifndef PSTRAIN_COMMON_HASH_H_
#define PSTRAIN_COMMON_HASH_H_

#include <cstdint>
#include <string>

namespace pstrain {

// splitmix64's step: every input bit moves every output bit.
inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// FNV-1a over a string's bytes.
inline uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_HASH_H_
