// One step's examples in host memory: what a data set hands to a model.
#ifndef PSTRAIN_WORKER_DATA_BATCH_H_
#define PSTRAIN_WORKER_DATA_BATCH_H_

#include <cstdint>
#include <vector>

namespace pstrain {

struct Batch {
  int rows = 0;                 // examples (MLP) or sequences (GPT)
  std::vector<float> x;         // MLP: [rows, input_dim]
  std::vector<int32_t> tokens;  // GPT: [rows, context]
  std::vector<int32_t> labels;  // MLP: [rows]; GPT: each token's next byte [rows, context]
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_DATA_BATCH_H_
