// The fused attention kernels (see attention.cuh).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <type_traits>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/launch.cuh"

namespace pstrain {
namespace kernels {
namespace {

// A block's rows (its threads), and the rows of the tile the block streams
// through shared memory, for heads of up to kD: the own-row arrays
// (kRows x (kD + 1), padded so a thread's row starts in its own bank) and
// the tiles fit the 48 KiB of static shared memory.
template <int kD>
struct Sizes {
  static constexpr int kRows = kD > 64 ? 32 : 64;
  static constexpr int kTile = 1024 / kD;
};

// x rounded to nearest even to the precision's 16 bits, as fp32.
template <int kRound>
__device__ __forceinline__ float Round(float x) {
  if (kRound == 1) return __bfloat162float(__float2bfloat16_rn(x));
  if (kRound == 2) return __half2float(__float2half_rn(x));
  return x;
}

// rows [first, first + kN) of a [seq, head_dim] matrix (rows `stride`
// apart) into to[kN][kStride], zeros past seq and head_dim; by the block's
// threads together.
template <int kN, int kD, int kStride>
__device__ void LoadRows(const AttentionArgs& a, const float* from, int stride, int first,
                         float (*to)[kStride]) {
  for (int e = threadIdx.x; e < kN * kD; e += blockDim.x) {
    const int r = e / kD, x = e % kD;
    const bool in = first + r < a.seq && x < a.head_dim;
    to[r][x] = in ? from[static_cast<int64_t>(first + r) * stride + x] : 0.0f;
  }
}

// acc[0, head_dim) * factor into the row `to`.
template <int kD>
__device__ void StoreRow(const AttentionArgs& a, const float (&acc)[kD], float factor, float* to) {
#pragma unroll
  for (int x = 0; x < kD; ++x) {
    if (x < a.head_dim) to[x] = acc[x] * factor;
  }
}

// A thread a query: its q in registers, the keys and values a tile at a
// time in shared memory, the online softmax over each tile. The blocks of
// the latest queries (the most keys) start first.
template <int kD>
__global__ void __launch_bounds__(Sizes<kD>::kRows)
    ForwardKernel(AttentionArgs a, const float* qkv, float* lse, float* out) {
  constexpr int kRows = Sizes<kD>::kRows, kTile = Sizes<kD>::kTile;
  __shared__ __align__(16) float k_s[kTile][kD];
  __shared__ __align__(16) float v_s[kTile][kD];
  const AttentionHead head(a, blockIdx.x);
  const int i0 = (gridDim.y - 1 - blockIdx.y) * kRows, t = i0 + threadIdx.x;
  const float* q_g = qkv + head.qkv_at;
  float q[kD], acc[kD];
#pragma unroll
  for (int x = 0; x < kD; ++x) {
    q[x] = t < a.seq && x < a.head_dim ? q_g[static_cast<int64_t>(t) * head.w3 + x] : 0.0f;
    acc[x] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const int last = min(a.seq, i0 + kRows) - 1;
  for (int j0 = 0; j0 <= last; j0 += kTile) {
    __syncthreads();  // the last tile read
    LoadRows<kTile, kD, kD>(a, q_g + head.c, head.w3, j0, k_s);
    LoadRows<kTile, kD, kD>(a, q_g + 2 * head.c, head.w3, j0, v_s);
    __syncthreads();
    if (t >= a.seq || j0 > t) continue;
    float s[kTile];
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < kTile; ++j) {
      float dot = 0.0f;
#pragma unroll
      for (int x = 0; x < kD; ++x) dot += q[x] * k_s[j][x];
      s[j] = j0 + j <= t ? dot * a.scale : -INFINITY;
      tile_max = fmaxf(tile_max, s[j]);
    }
    const float m_new = fmaxf(m, tile_max);  // finite: key j0 <= t is in the tile
    const float alpha = expf(m - m_new);     // 0 on the first tile
    l *= alpha;
#pragma unroll
    for (int x = 0; x < kD; ++x) acc[x] *= alpha;
#pragma unroll
    for (int j = 0; j < kTile; ++j) {
      const float p = expf(s[j] - m_new);  // 0 past t
      l += p;
#pragma unroll
      for (int x = 0; x < kD; ++x) acc[x] += p * v_s[j][x];
    }
    m = m_new;
  }
  if (t < a.seq) {
    StoreRow<kD>(a, acc, 1.0f / l, out + head.out_at + static_cast<int64_t>(t) * head.c);
    lse[head.lse_at + t] = m + logf(l);
  }
}

// delta = dout . out per query row (dout rounded as the products take it).
template <int kRound>
__global__ void DeltaKernel(AttentionArgs a, const float* out, const float* dout, float* delta) {
  const int64_t rows = static_cast<int64_t>(a.batch) * a.heads * a.seq;
  const int c = a.heads * a.head_dim;
  PSTRAIN_GRID_STRIDE(i, rows) {
    const int64_t bh = i / a.seq, t = i % a.seq;
    const int64_t at = (bh / a.heads * a.seq + t) * c + bh % a.heads * a.head_dim;
    float dot = 0.0f;
    for (int x = 0; x < a.head_dim; ++x) dot += Round<kRound>(dout[at + x]) * out[at + x];
    delta[i] = dot;
  }
}

// A thread a key: its k and v in shared memory (own rows), dk and dv in
// registers, the queries and output gradients from the key's block down a
// tile at a time. The blocks of the earliest keys (the most queries) start
// first.
template <int kD>
__global__ void __launch_bounds__(Sizes<kD>::kRows)
    KeysBackwardKernel(AttentionArgs a, const float* qkv, const float* lse, const float* dout,
                       const float* delta, float* dqkv) {
  constexpr int kRows = Sizes<kD>::kRows, kTile = Sizes<kD>::kTile;
  __shared__ float k_s[kRows][kD + 1];
  __shared__ float v_s[kRows][kD + 1];
  __shared__ __align__(16) float q_s[kTile][kD];
  __shared__ __align__(16) float do_s[kTile][kD];
  __shared__ float lse_s[kTile], delta_s[kTile];
  const AttentionHead head(a, blockIdx.x);
  const int j0 = blockIdx.y * kRows, j = j0 + threadIdx.x, me = threadIdx.x;
  const float* q_g = qkv + head.qkv_at;
  LoadRows<kRows, kD, kD + 1>(a, q_g + head.c, head.w3, j0, k_s);
  LoadRows<kRows, kD, kD + 1>(a, q_g + 2 * head.c, head.w3, j0, v_s);
  float dk[kD], dv[kD];
#pragma unroll
  for (int x = 0; x < kD; ++x) dk[x] = dv[x] = 0.0f;
  for (int i0 = j0; i0 < a.seq; i0 += kTile) {
    __syncthreads();  // the last tile read (and k_s, v_s loaded)
    LoadRows<kTile, kD, kD>(a, q_g, head.w3, i0, q_s);
    LoadRows<kTile, kD, kD>(a, dout + head.out_at, head.c, i0, do_s);
    for (int r = threadIdx.x; r < kTile; r += blockDim.x) {
      lse_s[r] = i0 + r < a.seq ? lse[head.lse_at + i0 + r] : 0.0f;
      delta_s[r] = i0 + r < a.seq ? delta[head.lse_at + i0 + r] : 0.0f;
    }
    __syncthreads();
    if (j >= a.seq) continue;
    for (int r = 0; r < kTile; ++r) {
      const int t = i0 + r;
      if (t < j || t >= a.seq) continue;
      float s = 0.0f, dp = 0.0f;
#pragma unroll
      for (int x = 0; x < kD; ++x) {
        s += q_s[r][x] * k_s[me][x];
        dp += do_s[r][x] * v_s[me][x];
      }
      const float p = expf(s * a.scale - lse_s[r]);
      const float ds = p * (dp - delta_s[r]);
#pragma unroll
      for (int x = 0; x < kD; ++x) {
        dv[x] += p * do_s[r][x];
        dk[x] += ds * q_s[r][x];
      }
    }
  }
  if (j < a.seq) {
    float* row = dqkv + head.qkv_at + static_cast<int64_t>(j) * head.w3;
    StoreRow<kD>(a, dk, a.scale, row + head.c);
    StoreRow<kD>(a, dv, 1.0f, row + 2 * head.c);
  }
}

// A thread a query: its q and output gradient in shared memory (own rows),
// dq in registers, the keys and values up to the block's last query a tile
// at a time.
template <int kD>
__global__ void __launch_bounds__(Sizes<kD>::kRows)
    QueriesBackwardKernel(AttentionArgs a, const float* qkv, const float* lse, const float* dout,
                          const float* delta, float* dqkv) {
  constexpr int kRows = Sizes<kD>::kRows, kTile = Sizes<kD>::kTile;
  __shared__ float q_s[kRows][kD + 1];
  __shared__ float do_s[kRows][kD + 1];
  __shared__ __align__(16) float k_s[kTile][kD];
  __shared__ __align__(16) float v_s[kTile][kD];
  const AttentionHead head(a, blockIdx.x);
  const int i0 = (gridDim.y - 1 - blockIdx.y) * kRows, t = i0 + threadIdx.x, me = threadIdx.x;
  const float* q_g = qkv + head.qkv_at;
  LoadRows<kRows, kD, kD + 1>(a, q_g, head.w3, i0, q_s);
  LoadRows<kRows, kD, kD + 1>(a, dout + head.out_at, head.c, i0, do_s);
  const float my_lse = t < a.seq ? lse[head.lse_at + t] : 0.0f;
  const float my_delta = t < a.seq ? delta[head.lse_at + t] : 0.0f;
  float dq[kD];
#pragma unroll
  for (int x = 0; x < kD; ++x) dq[x] = 0.0f;
  const int last = min(a.seq, i0 + kRows) - 1;
  for (int j0 = 0; j0 <= last; j0 += kTile) {
    __syncthreads();  // the last tile read (and q_s, do_s loaded)
    LoadRows<kTile, kD, kD>(a, q_g + head.c, head.w3, j0, k_s);
    LoadRows<kTile, kD, kD>(a, q_g + 2 * head.c, head.w3, j0, v_s);
    __syncthreads();
    if (t >= a.seq) continue;
    for (int r = 0; r < kTile && j0 + r <= t; ++r) {
      float s = 0.0f, dp = 0.0f;
#pragma unroll
      for (int x = 0; x < kD; ++x) {
        s += q_s[me][x] * k_s[r][x];
        dp += do_s[me][x] * v_s[r][x];
      }
      const float p = expf(s * a.scale - my_lse);
      const float ds = p * (dp - my_delta);
#pragma unroll
      for (int x = 0; x < kD; ++x) dq[x] += ds * k_s[r][x];
    }
  }
  if (t < a.seq) {
    StoreRow<kD>(a, dq, a.scale, dqkv + head.qkv_at + static_cast<int64_t>(t) * head.w3);
  }
}

// A grid of (sequence, head) pairs by blocks of rows.
template <int kD>
dim3 Grid(const AttentionArgs& a) {
  constexpr int kRows = Sizes<kD>::kRows;
  return dim3(a.batch * a.heads, (a.seq + kRows - 1) / kRows);
}

template <int kD>
cudaError_t Forward(const AttentionArgs& a, const float* qkv, float* lse, float* out,
                    cudaStream_t stream) {
  return LaunchKernel(ForwardKernel<kD>, Grid<kD>(a), Sizes<kD>::kRows, stream, a, qkv, lse, out);
}

template <int kD>
cudaError_t Backward(const AttentionArgs& a, const float* qkv, const float* lse, const float* dout,
                     const float* delta, float* dqkv, cudaStream_t stream) {
  const cudaError_t e = LaunchKernel(KeysBackwardKernel<kD>, Grid<kD>(a), Sizes<kD>::kRows, stream,
                                     a, qkv, lse, dout, delta, dqkv);
  if (e != cudaSuccess) return e;
  return LaunchKernel(QueriesBackwardKernel<kD>, Grid<kD>(a), Sizes<kD>::kRows, stream, a, qkv, lse,
                      dout, delta, dqkv);
}

}  // namespace

// fp32 on these kernels, 16 bits on the tensor cores' (attention_mma.cuh).
cudaError_t LaunchAttention(const AttentionArgs& a, const float* qkv, float* lse, float* out,
                            cudaStream_t stream) {
  if (a.round != 0) return LaunchAttentionMma(a, qkv, lse, out, stream);
  return ForHeadDim(a,
                    [&](auto d) { return Forward<decltype(d)::value>(a, qkv, lse, out, stream); });
}

cudaError_t LaunchAttentionBackward(const AttentionArgs& a, const float* qkv, const float* out,
                                    const float* lse, const float* dout, float* delta, float* dqkv,
                                    cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(a.batch) * a.heads * a.seq;
  cudaError_t e = cudaSuccess;
  switch (a.round) {
    case 1:
      e = LaunchKernel(DeltaKernel<1>, Blocks(rows), kThreads, stream, a, out, dout, delta);
      break;
    case 2:
      e = LaunchKernel(DeltaKernel<2>, Blocks(rows), kThreads, stream, a, out, dout, delta);
      break;
    default:
      e = LaunchKernel(DeltaKernel<0>, Blocks(rows), kThreads, stream, a, out, dout, delta);
  }
  if (e != cudaSuccess) return e;
  if (a.round != 0) return LaunchAttentionBackwardMma(a, qkv, lse, dout, delta, dqkv, stream);
  return ForHeadDim(a, [&](auto d) {
    return Backward<decltype(d)::value>(a, qkv, lse, dout, delta, dqkv, stream);
  });
}

}  // namespace kernels
}  // namespace pstrain
