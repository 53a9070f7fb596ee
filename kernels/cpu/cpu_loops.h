// The CPU backend's element-wise loops, compiled twice (AVX2 and baseline,
// picked at run time: common/simd.h) and written so both clones vectorise:
// no branch per element, no reordering of a sum (each output adds its terms
// in the same order as the plain loop), so the results are the same bits
// on every CPU.
#ifndef PSTRAIN_KERNELS_CPU_CPU_LOOPS_H_
#define PSTRAIN_KERNELS_CPU_CPU_LOOPS_H_

#include <cstdint>

namespace pstrain {
namespace kernels {
namespace cpu {

// y = x > 0 ? x : 0 (NaN and -0 give +0); y may be x.
void Relu(int64_t n, const float* x, float* y);
// dx = y > 0 ? dy : 0; dx may be dy.
void ReluBackward(int64_t n, const float* y, const float* dy, float* dx);
// y[r, j] += bias[j].
void AddBias(int rows, int cols, const float* bias, float* y);
// db[j] = dy[0, j] + dy[1, j] + ... (in row order).
void SumRows(int rows, int cols, const float* dy, float* db);
// GELU, tanh form, as x * sigmoid(2u) (= x/2 (1 + tanh u), u = sqrt(2/pi)
// (x + 0.044715 x^3)), with an exp of a few ulp's error: within 1e-6 of
// the definition absolutely and 2e-6 relatively (cpu_loops_test).
void Gelu(int64_t n, const float* x, float* y);  // y may be x
// dx = dy * GELU'(x); dx may be dy.
void GeluBackward(int64_t n, const float* x, const float* dy, float* dx);
// x *= alpha.
void Scale(int64_t n, float alpha, float* x);
// y += alpha * x (rounded after the product: no fused multiply-add).
void Axpy(int64_t n, float alpha, const float* x, float* y);

}  // namespace cpu
}  // namespace kernels
}  // namespace pstrain

#endif  // PSTRAIN_KERNELS_CPU_CPU_LOOPS_H_
