#include "common/simd.h"

namespace pstrain {

const char* SimdLevel() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "avx2+fma";
#endif
  return "scalar";
}

}  // namespace pstrain
