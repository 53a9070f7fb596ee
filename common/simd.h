// Run-time choice of the vector instruction set for memory-bound loops.
//
// A function marked PSTRAIN_SIMD_CLONES is compiled twice: once for
// AVX2 + FMA (Haswell and later) and once for the baseline x86-64; the loader
// picks the clone the CPU supports (GCC's target_clones, resolved through
// ifunc). Write such loops as plain element loops over __restrict pointers;
// the compiler vectorises the AVX2 clone (the library must be built with
// PSTRAIN_SIMD_COPTS).
#ifndef PSTRAIN_COMMON_SIMD_H_
#define PSTRAIN_COMMON_SIMD_H_

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PSTRAIN_SIMD_CLONES __attribute__((target_clones("arch=haswell", "default")))
#else
#define PSTRAIN_SIMD_CLONES
#endif

namespace pstrain {

// "avx2+fma" when the CPU runs the vector clones, else "scalar".
const char* SimdLevel();

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_SIMD_H_
