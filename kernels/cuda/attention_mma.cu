// The tensor-core attention kernels (see attention_mma.cuh).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/launch.cuh"

namespace pstrain {
namespace kernels {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kWarps = 4;
constexpr int kBlockRows = 16 * kWarps;  // a block's own rows, 16 a warp
constexpr int kTile = 64;                // rows of the tiles streamed past them
using Accumulator = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

template <typename T>
__device__ T To16(float x);
template <>
__device__ __nv_bfloat16 To16(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __half To16(float x) {
  return __float2half_rn(x);
}

// Row strides in shared memory (elements): 16-bit rows of head values and
// of score tiles padded by 8, float rows by 4, so that consecutive rows
// start in other banks; all keep wmma's 32-byte alignment at 16 x 16 tiles.
template <int kD>
struct Ld {
  static constexpr int kHead = kD + 8;
  static constexpr int kScores16 = kTile + 8;
  static constexpr int kScores = kTile + 4;
  static constexpr int kWide = (kD > kTile ? kD : kTile) + 4;  // scores, or a warp's output rows
};

// Byte offsets of a kernel's shared arrays, each 128-byte aligned.
struct SharedPlan {
  int bytes = 0;
  __host__ __device__ constexpr int Add(int n) {
    const int at = bytes;
    bytes += (n + 127) / 128 * 128;
    return at;
  }
};

template <int kD>
struct ForwardPlan : SharedPlan {
  int q = Add(kBlockRows * Ld<kD>::kHead * 2), k = Add(kTile * Ld<kD>::kHead * 2),
      v = Add(kTile * Ld<kD>::kHead * 2), s = Add(kWarps * 16 * Ld<kD>::kWide * 4),
      o = Add(kWarps * 16 * Ld<kD>::kWide * 4), p = Add(kWarps * 16 * Ld<kD>::kScores16 * 2),
      stat = Add(kWarps * 48 * 4);
};

// Both backward kernels: the block's own rows (x, y: k and v, or q and
// dout), the tile's (tx, ty), its rows' lse and delta, and each warp's
// scores, their gradients and 16-bit copies (the weights' only for the
// keys' kernel).
template <int kD, bool kKeys>
struct BackwardPlan : SharedPlan {
  int x = Add(kBlockRows * Ld<kD>::kHead * 2), y = Add(kBlockRows * Ld<kD>::kHead * 2),
      tx = Add(kTile * Ld<kD>::kHead * 2), ty = Add(kTile * Ld<kD>::kHead * 2),
      lse = Add(kBlockRows * 4), delta = Add(kBlockRows * 4),
      s = Add(kWarps * 16 * Ld<kD>::kWide * 4), dp = Add(kWarps * 16 * Ld<kD>::kScores * 4),
      p = Add(kKeys ? kWarps * 16 * Ld<kD>::kScores16 * 2 : 0),
      ds = Add(kWarps * 16 * Ld<kD>::kScores16 * 2);
};

template <typename U>
__device__ U* At(unsigned char* shared, int offset) {
  return reinterpret_cast<U*>(shared + offset);
}

// Rows [first, first + n) of a [seq, head_dim] fp32 matrix (rows `stride`
// apart) into `to` (rows Ld::kHead apart), rounded, zeros past seq and
// head_dim; by the block's threads together.
template <int kD, typename T>
__device__ void LoadRows(const AttentionArgs& a, const float* from, int stride, int first, int n,
                         T* to) {
  for (int e = threadIdx.x; e < n * kD; e += blockDim.x) {
    const int r = e / kD, x = e % kD;
    const bool in = first + r < a.seq && x < a.head_dim;
    to[r * Ld<kD>::kHead + x] =
        To16<T>(in ? from[static_cast<int64_t>(first + r) * stride + x] : 0.0f);
  }
}

// c += a [16, 16 kK] (row-major, 16-bit) times b [16 kK, 16] (row- or
// column-major), all in shared memory.
template <int kK, typename T, typename LayoutB>
__device__ void Product(const T* a, int lda, const T* b, int ldb, Accumulator& c) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LayoutB> fb;
#pragma unroll
  for (int kk = 0; kk < kK; ++kk) {
    wmma::load_matrix_sync(fa, a + kk * 16, lda);
    constexpr bool kRowMajor = std::is_same<LayoutB, wmma::row_major>::value;
    wmma::load_matrix_sync(fb, kRowMajor ? b + kk * 16 * ldb : b + kk * 16, ldb);
    wmma::mma_sync(c, fa, fb, c);
  }
}

// s [16, kTile] (fp32, rows `lds` apart) = x [16, kD] times y [kTile, kD]^T,
// x and y 16-bit rows of head values.
template <int kD, typename T>
__device__ void RowsTimesTileT(const T* x, const T* y, float* s, int lds) {
  Accumulator c;
#pragma unroll
  for (int n = 0; n < kTile / 16; ++n) {
    wmma::fill_fragment(c, 0.0f);
    Product<kD / 16, T, wmma::col_major>(x, Ld<kD>::kHead, y + n * 16 * Ld<kD>::kHead,
                                         Ld<kD>::kHead, c);
    wmma::store_matrix_sync(s + n * 16, c, lds, wmma::mem_row_major);
  }
}

// acc[n] += p [16, kTile] (16-bit scores) times columns [16 n, 16 n + 16)
// of y [kTile, kD] (16-bit head values).
template <int kD, typename T>
__device__ void TileTimesRows(const T* p, const T* y, Accumulator (&acc)[kD / 16]) {
#pragma unroll
  for (int n = 0; n < kD / 16; ++n) {
    Product<kTile / 16, T, wmma::row_major>(p, Ld<kD>::kScores16, y + n * 16, Ld<kD>::kHead,
                                            acc[n]);
  }
}

// A warp's acc [16, kD] times `factor` into rows first.. of `to` (rows
// `stride` apart, only those before seq and columns before head_dim),
// through `staging` [16, Ld::kWide].
template <int kD>
__device__ void StoreRows(const AttentionArgs& a, Accumulator (&acc)[kD / 16], float factor,
                          float* staging, int first, float* to, int stride) {
#pragma unroll
  for (int n = 0; n < kD / 16; ++n) {
    wmma::store_matrix_sync(staging + n * 16, acc[n], Ld<kD>::kWide, wmma::mem_row_major);
  }
  __syncwarp();
  const int lane = threadIdx.x % 32;
  for (int e = lane; e < 16 * kD; e += 32) {
    const int r = e / kD, x = e % kD;
    if (first + r < a.seq && x < a.head_dim) {
      to[static_cast<int64_t>(first + r) * stride + x] = staging[r * Ld<kD>::kWide + x] * factor;
    }
  }
  __syncwarp();
}

// Block: 64 queries, 16 a warp; the keys and values 64 at a time. Each
// warp's scores go through shared memory for the online softmax (two lanes
// a row), its output accumulates there in fp32, rescaled as the maximum
// moves. The blocks of the latest queries start first.
template <int kD, typename T>
__global__ void __launch_bounds__(32 * kWarps)
    ForwardKernel(AttentionArgs a, const float* qkv, float* lse, float* out) {
  constexpr ForwardPlan<kD> plan;
  constexpr int kWide = Ld<kD>::kWide;
  extern __shared__ __align__(128) unsigned char shared[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  T* q_s = At<T>(shared, plan.q);
  T* k_s = At<T>(shared, plan.k);
  T* v_s = At<T>(shared, plan.v);
  float* s_s = At<float>(shared, plan.s) + warp * 16 * kWide;
  float* o_s = At<float>(shared, plan.o) + warp * 16 * kWide;
  T* p_s = At<T>(shared, plan.p) + warp * 16 * Ld<kD>::kScores16;
  float* stat = At<float>(shared, plan.stat) + warp * 48;  // max, sum, rescale a row
  const AttentionHead head(a, blockIdx.x);
  const float* q_g = qkv + head.qkv_at;
  const int i0 = (gridDim.y - 1 - blockIdx.y) * kBlockRows, r0 = i0 + warp * 16;
  LoadRows<kD>(a, q_g, head.w3, i0, kBlockRows, q_s);
  for (int e = lane; e < 16 * kD; e += 32) o_s[e / kD * kWide + e % kD] = 0.0f;
  if (lane < 16) {
    stat[lane] = -INFINITY;
    stat[16 + lane] = 0.0f;
  }
  const int row = lane / 2, half = lane % 2, t = r0 + row;
  const int last = min(a.seq, i0 + kBlockRows) - 1;
  for (int j0 = 0; j0 <= last; j0 += kTile) {
    __syncthreads();  // the last tile read (and q_s loaded)
    LoadRows<kD>(a, q_g + head.c, head.w3, j0, kTile, k_s);
    LoadRows<kD>(a, q_g + 2 * head.c, head.w3, j0, kTile, v_s);
    __syncthreads();
    RowsTimesTileT<kD>(q_s + warp * 16 * Ld<kD>::kHead, k_s, s_s, kWide);
    __syncwarp();
    // Row `row`'s columns half, half + 2, ...: its lane and its pair's.
    const float* s_row = s_s + row * kWide;
    float mx = -INFINITY;
    for (int x = half; x < kTile; x += 2) {
      if (j0 + x <= t) mx = fmaxf(mx, s_row[x] * a.scale);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float m_old = stat[row];
    float m_new = fmaxf(m_old, mx);
    if (m_new == -INFINITY) m_new = 0.0f;  // nothing seen yet (no row of a real query)
    const float alpha = expf(m_old - m_new);
    float sum = 0.0f;
    T* p_row = p_s + row * Ld<kD>::kScores16;
    for (int x = half; x < kTile; x += 2) {
      const float p = j0 + x <= t ? expf(s_row[x] * a.scale - m_new) : 0.0f;
      sum += p;
      p_row[x] = To16<T>(p);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    __syncwarp();
    if (half == 0) {
      stat[row] = m_new;
      stat[16 + row] = stat[16 + row] * alpha + sum;
      stat[32 + row] = alpha;
    }
    // The tile's p v into s_s, then o = o * alpha + p v.
    Accumulator pv[kD / 16];
#pragma unroll
    for (int n = 0; n < kD / 16; ++n) wmma::fill_fragment(pv[n], 0.0f);
    TileTimesRows<kD>(p_s, v_s, pv);
#pragma unroll
    for (int n = 0; n < kD / 16; ++n) {
      wmma::store_matrix_sync(s_s + n * 16, pv[n], kWide, wmma::mem_row_major);
    }
    __syncwarp();
    for (int e = lane; e < 16 * kD; e += 32) {
      const int r = e / kD, at = r * kWide + e % kD;
      o_s[at] = o_s[at] * stat[32 + r] + s_s[at];
    }
    __syncwarp();
  }
  for (int e = lane; e < 16 * kD; e += 32) {
    const int r = e / kD, x = e % kD;
    if (r0 + r < a.seq && x < a.head_dim) {
      out[head.out_at + static_cast<int64_t>(r0 + r) * head.c + x] =
          o_s[r * kWide + x] / stat[16 + r];
    }
  }
  if (lane < 16 && r0 + lane < a.seq) {
    lse[head.lse_at + r0 + lane] = stat[lane] + logf(stat[16 + lane]);
  }
}

// The rows' lse and delta into shared memory (zeros past seq).
__device__ void LoadStats(const AttentionArgs& a, const float* lse, const float* delta, int64_t at,
                          int first, int n, float* lse_s, float* delta_s) {
  for (int r = threadIdx.x; r < n; r += blockDim.x) {
    const bool in = first + r < a.seq;
    lse_s[r] = in ? lse[at + first + r] : 0.0f;
    delta_s[r] = in ? delta[at + first + r] : 0.0f;
  }
}

// Block: 64 keys, 16 a warp; the queries and output gradients 64 at a time
// from the block's first key down. Each warp: s^T = k q^T and dp^T =
// v dout^T through shared memory, p^T and ds^T made there in 16 bits, then
// dv += p^T dout and dk += ds^T q in fragments.
template <int kD, typename T>
__global__ void __launch_bounds__(32 * kWarps)
    KeysBackwardKernel(AttentionArgs a, const float* qkv, const float* lse, const float* dout,
                       const float* delta, float* dqkv) {
  constexpr BackwardPlan<kD, true> plan;
  extern __shared__ __align__(128) unsigned char shared[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  T* k_s = At<T>(shared, plan.x);
  T* v_s = At<T>(shared, plan.y);
  T* q_s = At<T>(shared, plan.tx);
  T* do_s = At<T>(shared, plan.ty);
  float* lse_s = At<float>(shared, plan.lse);
  float* delta_s = At<float>(shared, plan.delta);
  float* s_s = At<float>(shared, plan.s) + warp * 16 * Ld<kD>::kWide;
  float* dp_s = At<float>(shared, plan.dp) + warp * 16 * Ld<kD>::kScores;
  T* p_s = At<T>(shared, plan.p) + warp * 16 * Ld<kD>::kScores16;
  T* ds_s = At<T>(shared, plan.ds) + warp * 16 * Ld<kD>::kScores16;
  const AttentionHead head(a, blockIdx.x);
  const float* q_g = qkv + head.qkv_at;
  const int j0 = blockIdx.y * kBlockRows, row = lane / 2, half = lane % 2;
  const int j = j0 + warp * 16 + row;
  LoadRows<kD>(a, q_g + head.c, head.w3, j0, kBlockRows, k_s);
  LoadRows<kD>(a, q_g + 2 * head.c, head.w3, j0, kBlockRows, v_s);
  Accumulator dk[kD / 16], dv[kD / 16];
#pragma unroll
  for (int n = 0; n < kD / 16; ++n) {
    wmma::fill_fragment(dk[n], 0.0f);
    wmma::fill_fragment(dv[n], 0.0f);
  }
  for (int i0 = j0; i0 < a.seq; i0 += kTile) {
    __syncthreads();  // the last tile read (and k_s, v_s loaded)
    LoadRows<kD>(a, q_g, head.w3, i0, kTile, q_s);
    LoadRows<kD>(a, dout + head.out_at, head.c, i0, kTile, do_s);
    LoadStats(a, lse, delta, head.lse_at, i0, kTile, lse_s, delta_s);
    __syncthreads();
    RowsTimesTileT<kD>(k_s + warp * 16 * Ld<kD>::kHead, q_s, s_s, Ld<kD>::kWide);
    RowsTimesTileT<kD>(v_s + warp * 16 * Ld<kD>::kHead, do_s, dp_s, Ld<kD>::kScores);
    __syncwarp();
    for (int x = half; x < kTile; x += 2) {
      const int t = i0 + x;
      const float p =
          t >= j && t < a.seq ? expf(s_s[row * Ld<kD>::kWide + x] * a.scale - lse_s[x]) : 0.0f;
      const float ds = p * (dp_s[row * Ld<kD>::kScores + x] - delta_s[x]);
      p_s[row * Ld<kD>::kScores16 + x] = To16<T>(p);
      ds_s[row * Ld<kD>::kScores16 + x] = To16<T>(ds);
    }
    __syncwarp();
    TileTimesRows<kD>(p_s, do_s, dv);
    TileTimesRows<kD>(ds_s, q_s, dk);
  }
  float* rows = dqkv + head.qkv_at;
  StoreRows<kD>(a, dk, a.scale, s_s, j0 + warp * 16, rows + head.c, head.w3);
  StoreRows<kD>(a, dv, 1.0f, s_s, j0 + warp * 16, rows + 2 * head.c, head.w3);
}

// Block: 64 queries, 16 a warp; the keys and values 64 at a time up to the
// block's last query. Each warp: s = q k^T and dp = dout v^T through shared
// memory, ds made there in 16 bits, then dq += ds k in fragments.
template <int kD, typename T>
__global__ void __launch_bounds__(32 * kWarps)
    QueriesBackwardKernel(AttentionArgs a, const float* qkv, const float* lse, const float* dout,
                          const float* delta, float* dqkv) {
  constexpr BackwardPlan<kD, false> plan;
  extern __shared__ __align__(128) unsigned char shared[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  T* q_s = At<T>(shared, plan.x);
  T* do_s = At<T>(shared, plan.y);
  T* k_s = At<T>(shared, plan.tx);
  T* v_s = At<T>(shared, plan.ty);
  float* lse_s = At<float>(shared, plan.lse);
  float* delta_s = At<float>(shared, plan.delta);
  float* s_s = At<float>(shared, plan.s) + warp * 16 * Ld<kD>::kWide;
  float* dp_s = At<float>(shared, plan.dp) + warp * 16 * Ld<kD>::kScores;
  T* ds_s = At<T>(shared, plan.ds) + warp * 16 * Ld<kD>::kScores16;
  const AttentionHead head(a, blockIdx.x);
  const float* q_g = qkv + head.qkv_at;
  const int i0 = (gridDim.y - 1 - blockIdx.y) * kBlockRows, row = lane / 2, half = lane % 2;
  const int mine = warp * 16 + row, t = i0 + mine;
  LoadRows<kD>(a, q_g, head.w3, i0, kBlockRows, q_s);
  LoadRows<kD>(a, dout + head.out_at, head.c, i0, kBlockRows, do_s);
  LoadStats(a, lse, delta, head.lse_at, i0, kBlockRows, lse_s, delta_s);
  Accumulator dq[kD / 16];
#pragma unroll
  for (int n = 0; n < kD / 16; ++n) wmma::fill_fragment(dq[n], 0.0f);
  const int last = min(a.seq, i0 + kBlockRows) - 1;
  for (int j0 = 0; j0 <= last; j0 += kTile) {
    __syncthreads();  // the last tile read (and the block's rows loaded)
    LoadRows<kD>(a, q_g + head.c, head.w3, j0, kTile, k_s);
    LoadRows<kD>(a, q_g + 2 * head.c, head.w3, j0, kTile, v_s);
    __syncthreads();
    RowsTimesTileT<kD>(q_s + warp * 16 * Ld<kD>::kHead, k_s, s_s, Ld<kD>::kWide);
    RowsTimesTileT<kD>(do_s + warp * 16 * Ld<kD>::kHead, v_s, dp_s, Ld<kD>::kScores);
    __syncwarp();
    for (int x = half; x < kTile; x += 2) {
      const int key = j0 + x;
      const float p = key <= t && key < a.seq
                          ? expf(s_s[row * Ld<kD>::kWide + x] * a.scale - lse_s[mine])
                          : 0.0f;
      const float ds = p * (dp_s[row * Ld<kD>::kScores + x] - delta_s[mine]);
      ds_s[row * Ld<kD>::kScores16 + x] = To16<T>(ds);
    }
    __syncwarp();
    TileTimesRows<kD>(ds_s, k_s, dq);
  }
  StoreRows<kD>(a, dq, a.scale, s_s, i0 + warp * 16, dqkv + head.qkv_at, head.w3);
}

// Queues `kernel` with `bytes` of dynamic shared memory a block, its limit
// raised to that first.
template <typename... Params, typename... Args>
cudaError_t LaunchShared(void (*kernel)(Params...), dim3 grid, int bytes, cudaStream_t stream,
                         Args... args) {
  const cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e != cudaSuccess) return e;
  return LaunchKernel(kernel, grid, dim3(32 * kWarps), static_cast<size_t>(bytes), stream, args...);
}

template <int kD, typename T>
cudaError_t Run(const AttentionArgs& a, const float* qkv, float* lse, float* out,
                cudaStream_t stream) {
  const dim3 grid(a.batch * a.heads, (a.seq + kBlockRows - 1) / kBlockRows);
  return LaunchShared(ForwardKernel<kD, T>, grid, ForwardPlan<kD>().bytes, stream, a, qkv, lse,
                      out);
}

template <int kD, typename T>
cudaError_t RunBackward(const AttentionArgs& a, const float* qkv, const float* lse,
                        const float* dout, const float* delta, float* dqkv, cudaStream_t stream) {
  const dim3 grid(a.batch * a.heads, (a.seq + kBlockRows - 1) / kBlockRows);
  const cudaError_t e =
      LaunchShared(KeysBackwardKernel<kD, T>, grid, BackwardPlan<kD, true>().bytes, stream, a, qkv,
                   lse, dout, delta, dqkv);
  if (e != cudaSuccess) return e;
  return LaunchShared(QueriesBackwardKernel<kD, T>, grid, BackwardPlan<kD, false>().bytes, stream,
                      a, qkv, lse, dout, delta, dqkv);
}

// fn(kD, T) for a's head size (rounded up: ForHeadDim) and 16-bit type T.
template <typename Fn>
cudaError_t Dispatch(const AttentionArgs& a, Fn fn) {
  return ForHeadDim(a, [&](auto d) {
    if (a.round == 1) return fn(d, __nv_bfloat16());
    return fn(d, __half());
  });
}

}  // namespace

cudaError_t LaunchAttentionMma(const AttentionArgs& a, const float* qkv, float* lse, float* out,
                               cudaStream_t stream) {
  return Dispatch(a, [&](auto d, auto t) {
    return Run<decltype(d)::value, decltype(t)>(a, qkv, lse, out, stream);
  });
}

cudaError_t LaunchAttentionBackwardMma(const AttentionArgs& a, const float* qkv, const float* lse,
                                       const float* dout, const float* delta, float* dqkv,
                                       cudaStream_t stream) {
  return Dispatch(a, [&](auto d, auto t) {
    return RunBackward<decltype(d)::value, decltype(t)>(a, qkv, lse, dout, delta, dqkv, stream);
  });
}

}  // namespace kernels
}  // namespace pstrain
