// The op interface a worker's model runs on. kernels/cpu/ implements it with
// OpenBLAS and plain loops; a CUDA backend implements the same interface.
// Matrices are row-major fp32; every pointer is memory of the backend's device
// (host memory for the CPU backend).
#ifndef PSTRAIN_KERNELS_BACKEND_H_
#define PSTRAIN_KERNELS_BACKEND_H_

#include <cstdint>
#include <memory>

namespace pstrain {
namespace kernels {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // c[m,n] = alpha * op(a) * op(b) + beta * c, where op(a) is [m,k] (a is
  // stored [k,m] when trans_a) and op(b) is [k,n] (b stored [n,k] when trans_b).
  virtual void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                    const float* a, const float* b, float beta, float* c) = 0;
  // y[r, j] += bias[j] for r < rows, j < cols.
  virtual void AddBias(int rows, int cols, const float* bias, float* y) = 0;
  // db[j] = sum over r of dy[r, j].
  virtual void BiasGrad(int rows, int cols, const float* dy, float* db) = 0;
  // y = max(x, 0), elementwise; y may alias x.
  virtual void ReluForward(int64_t n, const float* x, float* y) = 0;
  // dx = dy where y > 0, else 0; dx may alias dy.
  virtual void ReluBackward(int64_t n, const float* y, const float* dy, float* dx) = 0;
  // Softmax cross-entropy of `rows` rows of `classes` logits against integer
  // labels in [0, classes). Returns the mean loss; *correct counts rows whose
  // arg-max is the label. If dlogits is not null it receives the gradient of
  // the mean loss: (softmax - onehot) / rows.
  virtual float SoftmaxXent(int rows, int classes, const float* logits, const int32_t* labels,
                            float* dlogits, int* correct) = 0;
};

}  // namespace kernels
}  // namespace pstrain

#endif  // PSTRAIN_KERNELS_BACKEND_H_
