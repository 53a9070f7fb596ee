// The CPU backend's element-wise loops, compiled twice (AVX2 and baseline,
// picked at run time: common/simd.h) and written so both clones vectorise:
// no branch per element. The element-wise ones add nothing up in another
// order than the plain loop would (the same bits as it, on every CPU); the
// row reductions (ExpSum, LayerNorm's sums)
// add in vector lanes first, 8 in the AVX2 clone and 4 in the baseline one,
// so their last bits depend on the clone the CPU runs. The arrays a
// function takes are distinct unless it says an output may be an input.
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
// db[j] = dy[0, j] + dy[1, j] + ... (in row order) for j < cols, rows
// `stride` floats apart.
void SumRows(int rows, int cols, int64_t stride, const float* dy, float* db);
// GELU, tanh form, as x * sigmoid(2u) (= x/2 (1 + tanh u), u = sqrt(2/pi)
// (x + 0.044715 x^3)), with an exp of a few ulp's error: within 1e-6 of
// the definition absolutely and 2e-6 relatively (cpu_loops_test).
void Gelu(int64_t n, const float* x, float* y);  // y may be x
// dx = dy * GELU'(x); dx may be dy.
void GeluBackward(int64_t n, const float* x, const float* dy, float* dx);
// The largest of x[0..n) (n >= 1).
float Max(int n, const float* x);
// e[j] = e^(x[j] - shift) for j < n, x[j] <= shift (differences below -87
// give e^-87 ~ 1.6e-38 instead of less), and returns their sum (summed in
// vector lanes, then across them); e may be x.
float ExpSum(int n, const float* x, float shift, float* e);
// The softmax's backward along a row of probabilities a given the dot
// product a.d (attention's backward has it from the output):
// d = a * (d - dot).
void SoftmaxBackwardGiven(int n, const float* a, float dot, float* d);
// y = (x - mean) / sqrt(var + 1e-5) * gamma + beta per row of x [rows,
// dim]; each row's mean and 1/sqrt(var + 1e-5) go to mean and rstd. The
// row sums are summed in vector lanes, then across them.
void LayerNorm(int rows, int dim, const float* x, const float* gamma, const float* beta, float* y,
               float* mean, float* rstd);
// Its backward, in two parts that split over threads without changing a
// sum: dx of rows [0, rows) (written); and dgamma and dbeta of columns
// [begin, end) (written; summed over the rows in row order).
void LayerNormBackwardRows(int rows, int dim, const float* x, const float* gamma, const float* mean,
                           const float* rstd, const float* dy, float* dx);
void LayerNormParamGrads(int rows, int dim, int begin, int end, const float* x, const float* mean,
                         const float* rstd, const float* dy, float* dgamma, float* dbeta);
// x *= alpha.
void Scale(int64_t n, float alpha, float* x);
// y += alpha * x (rounded after the product: no fused multiply-add).
void Axpy(int64_t n, float alpha, const float* x, float* y);

}  // namespace cpu
}  // namespace kernels
}  // namespace pstrain

#endif  // PSTRAIN_KERNELS_CPU_CPU_LOOPS_H_
