#include "common/simd.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// A probe with the clones every PSTRAIN_SIMD_CLONES loop gets; its resolver is
// the function the loader calls to bind each of them.
extern "C" PSTRAIN_SIMD_CLONES void pstrain_simd_probe() {}
extern "C" void* pstrain_simd_probe_resolver() __asm__("pstrain_simd_probe.resolver");
extern "C" void pstrain_simd_probe_default() __asm__("pstrain_simd_probe.default");
#endif

namespace pstrain {

const char* SimdLevel() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  const void* picked = pstrain_simd_probe_resolver();
  if (picked != reinterpret_cast<const void*>(&pstrain_simd_probe_default)) return "avx2+fma";
#endif
  return "scalar";
}

}  // namespace pstrain
