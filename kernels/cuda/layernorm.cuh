// The CUDA backend's LayerNorm kernels, one block of kThreads per row of x
// [rows, dim]; the parameters' gradients are column sums
// (column_sums.cuh). The ops' contracts are Backend's (kernels/backend.h).
// nvcc only.
#ifndef PSTRAIN_KERNELS_CUDA_LAYERNORM_CUH_
#define PSTRAIN_KERNELS_CUDA_LAYERNORM_CUH_

namespace pstrain {
namespace kernels {

// y = (x - mean) / sqrt(var + 1e-5) * gamma + beta; saves the row's mean
// and rstd = 1 / sqrt(var + 1e-5).
__global__ void LayerNormKernel(int dim, const float* x, const float* gamma, const float* beta,
                                float* y, float* mean, float* rstd);
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma.
__global__ void LayerNormBackwardKernel(int dim, const float* x, const float* gamma,
                                        const float* mean, const float* rstd, const float* dy,
                                        float* dx);

}  // namespace kernels
}  // namespace pstrain

#endif  // PSTRAIN_KERNELS_CUDA_LAYERNORM_CUH_
