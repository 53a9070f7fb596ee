// Run-time choice of the vector instruction set for memory-bound loops.
//
// A function marked PSTRAIN_SIMD_CLONES is compiled twice: once for the
// x86-64-v3 level (AVX2, FMA, BMI2: Haswell, Zen and later) and once for the
// baseline x86-64; the loader picks the clone the CPU supports (GCC's
// target_clones, resolved through ifunc). Write such loops as plain element
// loops over __restrict pointers; the compiler vectorises the AVX2 clone (the
// library must be built with PSTRAIN_SIMD_COPTS).
//
// The level is named, not a CPU: GCC resolves "arch=haswell" with
// __builtin_cpu_is("haswell"), true on Intel Haswell only, so every other
// CPU (Skylake, every AMD EPYC) silently ran the baseline SSE2 clone.
// "arch=x86-64-v3" is resolved from the CPU's feature bits.
#ifndef PSTRAIN_COMMON_SIMD_H_
#define PSTRAIN_COMMON_SIMD_H_

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PSTRAIN_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define PSTRAIN_SIMD_CLONES
#endif

namespace pstrain {

// "avx2+fma" when the loader picked the vector clones, else "scalar"; read
// from the same resolver the loader runs, so it cannot disagree with it.
const char* SimdLevel();

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_SIMD_H_
