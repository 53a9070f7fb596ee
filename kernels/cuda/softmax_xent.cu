// The loss kernel (see softmax_xent.cuh).
#include <cmath>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/softmax_xent.cuh"

namespace pstrain {
namespace kernels {

__global__ void SoftmaxXentKernel(int rows, int classes, const float* logits, const int32_t* labels,
                                  float* dlogits, float* row_loss, int* row_right) {
  __shared__ float best[kThreads];
  __shared__ int best_at[kThreads];
  __shared__ float sums[kThreads];
  const int r = blockIdx.x;
  const float* z = logits + static_cast<int64_t>(r) * classes;
  float m = -INFINITY;
  int at = classes;
  for (int j = threadIdx.x; j < classes; j += blockDim.x) {
    if (z[j] > m || (z[j] == m && j < at)) {
      m = z[j];
      at = j;
    }
  }
  best[threadIdx.x] = m;
  best_at[threadIdx.x] = at;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) {
      const float o = best[threadIdx.x + s];
      const int o_at = best_at[threadIdx.x + s];
      if (o > best[threadIdx.x] || (o == best[threadIdx.x] && o_at < best_at[threadIdx.x])) {
        best[threadIdx.x] = o;
        best_at[threadIdx.x] = o_at;
      }
    }
    __syncthreads();
  }
  const float zmax = best[0];
  float sum = 0.0f;
  for (int j = threadIdx.x; j < classes; j += blockDim.x) sum += expf(z[j] - zmax);
  sums[threadIdx.x] = sum;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) sums[threadIdx.x] += sums[threadIdx.x + s];
    __syncthreads();
  }
  const float log_sum = logf(sums[0]);
  const int label = labels[r];
  const bool valid = label >= 0 && label < classes;
  if (threadIdx.x == 0) {
    row_loss[r] = valid ? log_sum - (z[label] - zmax) : NAN;
    row_right[r] = valid && best_at[0] == label ? 1 : 0;
  }
  if (dlogits != nullptr) {
    const float inv_rows = 1.0f / static_cast<float>(rows);
    float* d = dlogits + static_cast<int64_t>(r) * classes;
    for (int j = threadIdx.x; j < classes; j += blockDim.x) {
      const float p = expf(z[j] - zmax - log_sum);
      d[j] = (p - (j == label ? 1.0f : 0.0f)) * inv_rows;
    }
  }
}

}  // namespace kernels
}  // namespace pstrain
