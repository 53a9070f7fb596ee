#ifndef PSTRAIN_SERVER_OPTIMIZERS_ADAFACTOR_H_
#define PSTRAIN_SERVER_OPTIMIZERS_ADAFACTOR_H_

#include "server/optimizer.h"

namespace pstrain {

// Adafactor (Shazeer & Stern) without a first moment, with the learning rate
// from the schedule (no relative step, no parameter scaling) and decoupled
// weight decay. With b = 1 - t^decay_rate and G = g^2 + eps:
//   matrix chunk (rows x cols), state R[rows], C[cols]:
//     R = b * R + (1 - b) * rowmean(G);  C = b * C + (1 - b) * colmean(G)
//     V = R C^T / mean(R)
//   vector chunk, state V[n]:
//     V = b * V + (1 - b) * G
//   U = g / sqrt(V);  U /= max(1, rms(U) / clip_threshold)
//   w -= lr * (U + wd * w)
// A chunk is a matrix when it holds whole rows of a 2-D parameter (the
// partition cuts 2-D parameters at row boundaries), so the statistics are
// per chunk: a parameter cut into k chunks keeps k column vectors.
class Adafactor : public Optimizer {
 public:
  Adafactor(float decay_rate, float eps, float clip_threshold, float wd)
      : decay_rate_(decay_rate), eps_(eps), clip_threshold_(clip_threshold), wd_(wd) {}

  int64_t StateFloats(const ChunkShape& shape) const override;
  void Update(const UpdateContext& ctx, const ChunkShape& shape, float* w, float* state,
              const float* g, ThreadPool* pool) const override;

 private:
  const float decay_rate_, eps_, clip_threshold_, wd_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_OPTIMIZERS_ADAFACTOR_H_
