// The dense products' variants for bench/attention_sweep's table: one GEMM
// shape timed with CUDA events in each way a 16-bit step could take it, so
// that one GPU call says what 16-bit activations end to end would gain
// (issue 68 item 2) and whether cuBLAS's own down-conversion beats the
// backend's rounding pass:
//
//   fp32           cublasSgemm (the fp32 step's)
//   tf32           the same on TF32 tensor cores (ps_worker --tf32)
//   round+16       both operands rounded fp32 -> 16 bits by a kernel, then
//                  cublasGemmEx 16-bit in, fp32 out (the backend's Gemm16)
//   16-in-16-out   cublasGemmEx 16-bit in and out (what a step whose
//                  activations stay 16-bit would run)
//   fast-16        cublasGemmEx fp32 in and out with CUBLAS_COMPUTE_32F_FAST_16BF
//                  or _16F (cuBLAS rounds inside the product)
//
// Host code's header; gemm_variants.cu is nvcc's. Without CUDA the rows say
// so.
#ifndef PSTRAIN_BENCH_GEMM_VARIANTS_H_
#define PSTRAIN_BENCH_GEMM_VARIANTS_H_

#include <string>
#include <vector>

namespace pstrain {

struct GemmVariantTime {
  std::string variant;  // "fp32", "tf32", "round+16", "16-in-16-out", "fast-16"
  double ms = 0;        // median over the repetitions
  double tflops = 0;
  std::string error;  // why it did not run ("" when it did)
};

// C[m, n] = A[m, k] B[k, n] (row-major, the backend's forward product) on
// CUDA device `device`, `reps` timed runs after 2 warm-ups, in bf16 (else
// fp16) where a variant is 16-bit.
std::vector<GemmVariantTime> TimeGemmVariants(int device, int m, int n, int k, bool bf16,
                                              int reps);

}  // namespace pstrain

#endif  // PSTRAIN_BENCH_GEMM_VARIANTS_H_
