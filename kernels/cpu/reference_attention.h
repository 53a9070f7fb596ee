// Causal attention as its definition reads, each (sequence, head) pair's
// [seq, seq] weights made whole, in double: the reference the backends'
// tiled attention (Backend::Attention, kernels/backend.h) is tested
// against. In 16-bit precision it rounds what the backends round before a
// product: q, k, v and the output's gradient, the weights and the scores'
// gradients. Tests only.
#ifndef PSTRAIN_KERNELS_CPU_REFERENCE_ATTENTION_H_
#define PSTRAIN_KERNELS_CPU_REFERENCE_ATTENTION_H_

#include "kernels/backend.h"

namespace pstrain {
namespace kernels {

// Backend::Attention's out and lse, and (when not null) the weights, att
// [batch, heads, seq, seq] (zero above the diagonal).
void ReferenceAttention(Precision precision, int batch, int seq, int heads, int head_dim,
                        const float* qkv, float* lse, float* out, float* att = nullptr);
// Backend::AttentionBackward's dqkv.
void ReferenceAttentionBackward(Precision precision, int batch, int seq, int heads, int head_dim,
                                const float* qkv, const float* dout, float* dqkv);

}  // namespace kernels
}  // namespace pstrain

#endif  // PSTRAIN_KERNELS_CPU_REFERENCE_ATTENTION_H_
