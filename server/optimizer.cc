#include "server/optimizer.h"

#include "server/optimizers/adam.h"
#include "server/optimizers/momentum.h"
#include "server/optimizers/sgd.h"

namespace pstrain {

absl::StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(const OptimizerSpec& spec) {
  switch (spec.type()) {
    case SGD:
      return std::make_unique<Sgd>(spec.learning_rate(), spec.weight_decay());
    case MOMENTUM:
      return std::make_unique<Momentum>(spec.learning_rate(), spec.momentum(),
                                        spec.weight_decay());
    case ADAM:
      return std::make_unique<Adam>(spec.learning_rate(), spec.beta1(), spec.beta2(),
                                    spec.epsilon(), spec.weight_decay());
    default:
      return absl::InvalidArgumentError("optimizer: unknown type");
  }
}

}  // namespace pstrain
