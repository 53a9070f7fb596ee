// The CUDA backend's attention (Backend::Attention and AttentionBackward,
// kernels/backend.h) as fused kernels in the shape of flash attention (Dao
// et al., 2022): no [seq, seq] array is written. Each (sequence, head) pair
// is cut into blocks of rows; the keys and values (or the queries and
// output gradients) stream through shared memory a tile at a time, the
// softmax runs online in fp32 (a running maximum and sum per query), and
// the backward recomputes each score from the saved log-sum-exp: one kernel
// gives dk and dv (a block of keys), another dq (a block of queries), so
// nothing is added up by atomics and every bit is the same from run to run.
// fp32 runs on the CUDA cores, a thread a row (attention.cu); bf16 and fp16
// on the tensor cores, 16 rows a warp (attention_mma.cuh), with q, k, v, the
// output's gradient, the weights and the scores' gradients rounded where
// the products take them, as the CPU backend rounds them. The tiles are
// sized for head_dim rounded up to 32, 64 or 128 (zeros past head_dim);
// larger heads are refused. nvcc only.
#ifndef PSTRAIN_KERNELS_CUDA_ATTENTION_CUH_
#define PSTRAIN_KERNELS_CUDA_ATTENTION_CUH_

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace pstrain {
namespace kernels {

// The largest head_dim the kernels take.
constexpr int kMaxHeadDim = 128;

// Backend::Attention's sizes and the products' input rounding.
struct AttentionArgs {
  int batch, seq, heads, head_dim;
  float scale;  // 1 / sqrt(head_dim)
  int round;    // 0: none (fp32), 1: bf16, 2: fp16
};

// Queue the forward, and the backward (`delta`: scratch of batch * heads *
// seq floats), on `stream`; the launch's error, cudaSuccess once queued.
// head_dim must be at most kMaxHeadDim.
cudaError_t LaunchAttention(const AttentionArgs& a, const float* qkv, float* lse, float* out,
                            cudaStream_t stream);
cudaError_t LaunchAttentionBackward(const AttentionArgs& a, const float* qkv, const float* out,
                                    const float* lse, const float* dout, float* delta, float* dqkv,
                                    cudaStream_t stream);

// ---- Shared by attention.cu and attention_mma.cu ---------------------

// Where (sequence, head) pair `bh`'s rows lie: q, k and v (and their
// gradients) rows w3 floats apart from qkv_at, out and dout rows c apart
// from out_at, lse and delta from lse_at.
struct AttentionHead {
  __device__ AttentionHead(const AttentionArgs& a, int bh)
      : c(a.heads * a.head_dim),
        w3(3 * c),
        qkv_at(static_cast<int64_t>(bh / a.heads) * a.seq * w3 + (bh % a.heads) * a.head_dim),
        out_at(static_cast<int64_t>(bh / a.heads) * a.seq * c + (bh % a.heads) * a.head_dim),
        lse_at(static_cast<int64_t>(bh) * a.seq) {}
  const int c, w3;
  const int64_t qkv_at, out_at, lse_at;
};

// fn(std::integral_constant<int, kD>) for a's head size rounded up to the
// kernels' tile widths 32, 64 or 128; cudaErrorInvalidValue past
// kMaxHeadDim.
template <typename Fn>
cudaError_t ForHeadDim(const AttentionArgs& a, Fn fn) {
  if (a.head_dim <= 32) return fn(std::integral_constant<int, 32>());
  if (a.head_dim <= 64) return fn(std::integral_constant<int, 64>());
  if (a.head_dim <= kMaxHeadDim) return fn(std::integral_constant<int, 128>());
  return cudaErrorInvalidValue;
}

}  // namespace kernels
}  // namespace pstrain

#endif  // PSTRAIN_KERNELS_CUDA_ATTENTION_CUH_
