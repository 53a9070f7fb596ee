#include "server/optimizer.h"

#include "absl/strings/str_cat.h"
#include "server/optimizers/adadelta.h"
#include "server/optimizers/adafactor.h"
#include "server/optimizers/adagrad.h"
#include "server/optimizers/adam.h"
#include "server/optimizers/adamw.h"
#include "server/optimizers/lion.h"
#include "server/optimizers/momentum.h"
#include "server/optimizers/nesterov.h"
#include "server/optimizers/rmsprop.h"
#include "server/optimizers/sgd.h"

namespace pstrain {

void ElementwiseOptimizer::Update(const UpdateContext& ctx, const ChunkShape& shape, float* w,
                                  float* state, const float* g, ThreadPool* pool) const {
  const int64_t n = shape.numel();
  auto range = [&](int64_t begin, int64_t end) {
    UpdateRange(ctx, w + begin, state == nullptr ? nullptr : state + begin, n + kArrayGap,
                g + begin, end - begin);
  };
  if (pool == nullptr) {
    range(0, n);
  } else {
    pool->ParallelFor(n, kMinUpdateGrain, range);
  }
}

absl::StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(const OptimizerSpec& s) {
  const float wd = s.weight_decay();
  switch (s.type()) {
    case SGD:
      return std::make_unique<Sgd>(wd);
    case MOMENTUM:
      return std::make_unique<Momentum>(s.momentum(), wd);
    case NESTEROV:
      return std::make_unique<Nesterov>(s.momentum(), wd);
    case ADAGRAD:
      return std::make_unique<Adagrad>(s.epsilon(), wd);
    case RMSPROP:
      return std::make_unique<RmsProp>(s.rho(), s.epsilon(), wd);
    case ADADELTA:
      return std::make_unique<Adadelta>(s.rho(), s.epsilon(), wd);
    case ADAM:
      return std::make_unique<Adam>(s.beta1(), s.beta2(), s.epsilon(), wd);
    case ADAMW:
      return std::make_unique<AdamW>(s.beta1(), s.beta2(), s.epsilon(), wd);
    case ADAFACTOR:
      return std::make_unique<Adafactor>(s.decay_rate(), s.epsilon(), s.clip_threshold(), wd);
    case LION:
      return std::make_unique<Lion>(s.beta1(), s.beta2(), wd);
    default:
      return absl::InvalidArgumentError(absl::StrCat("optimizer: unknown type ", s.type()));
  }
}

}  // namespace pstrain
