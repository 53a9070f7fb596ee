// The CPU backend's attention (Backend::Attention and AttentionBackward,
// kernels/backend.h) one (sequence, head) pair at a time, in the shape of
// flash attention (Dao et al., 2022): queries and keys in square tiles,
// each tile's scores made by one OpenBLAS product, softmaxed online (a
// running maximum and sum per query row, the output rescaled when the
// maximum moves), and the backward recomputing each tile's weights from the
// saved log-sum-exp. Tiles wholly above the causal diagonal are skipped, so
// the products do half the work of the full [seq, seq] ones, and the
// memory a head takes is a few tiles', whatever seq is.
#ifndef PSTRAIN_KERNELS_CPU_CPU_ATTENTION_H_
#define PSTRAIN_KERNELS_CPU_CPU_ATTENTION_H_

#include <cstdint>

#include "kernels/backend.h"

namespace pstrain {
namespace kernels {
namespace cpu {

// Rows and columns of a tile of scores: the forward's, and the backward's
// (five products a tile, where the forward has two: a smaller tile skips
// more of the causal diagonal's masked half; measured on the 6 x 384 GPT,
// context 256, the backward took 40 ms a step in tiles of 64 and 45 in
// tiles of 128, the forward 58-60 ms in 128 and 61-63 in 64 at context
// 1024).
constexpr int kForwardTile = 128;
constexpr int kBackwardTile = 64;

// Backend::Attention's sizes.
struct AttentionShape {
  int batch, seq, heads, head_dim;
};

// out[i] = x[i] rounded to the precision's 16 bits (nearest even) and back
// to fp32, or x[i] itself in fp32; out may be x.
void RoundTo(Precision precision, int64_t n, const float* x, float* out);

// Head h of sequence b of Backend::Attention: its columns of out and its
// row of lse. qkv already rounded to the precision (RoundTo).
void AttentionHead(const AttentionShape& s, Precision precision, const float* qkv, int64_t b, int h,
                   float* lse, float* out);

// Head h of sequence b of Backend::AttentionBackward: its columns of dqkv
// (written). qkv and dout already rounded to the precision.
void AttentionBackwardHead(const AttentionShape& s, Precision precision, const float* qkv,
                           const float* out, const float* lse, const float* dout, int64_t b, int h,
                           float* dqkv);

}  // namespace cpu
}  // namespace kernels
}  // namespace pstrain

#endif  // PSTRAIN_KERNELS_CPU_CPU_ATTENTION_H_
