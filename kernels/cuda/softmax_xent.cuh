// The CUDA backend's loss kernel: softmax cross-entropy, one block of
// kThreads per row of logits (Backend::SoftmaxXent, kernels/backend.h).
// nvcc only.
#ifndef PSTRAIN_KERNELS_CUDA_SOFTMAX_XENT_CUH_
#define PSTRAIN_KERNELS_CUDA_SOFTMAX_XENT_CUH_

#include <cstdint>

namespace pstrain {
namespace kernels {

// Per row: the maximum (first index on ties), the log of the sum of
// exponentials, the row's loss (row_loss) and whether the arg-max is the
// label (row_right, 1 or 0); the gradient (softmax - onehot) / rows when
// dlogits is set. A label outside [0, classes) gives a NaN loss.
__global__ void SoftmaxXentKernel(int rows, int classes, const float* logits,
                                  const int32_t* labels, float* dlogits, float* row_loss,
                                  int* row_right);

}  // namespace kernels
}  // namespace pstrain

#endif  // PSTRAIN_KERNELS_CUDA_SOFTMAX_XENT_CUH_
