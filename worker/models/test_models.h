// Small models and data for the tests of models and pipeline stages: a GPT
// of a few blocks, seeded weights with noise (so every path carries
// signal), random batches, and the largest relative difference of two sets
// of gradients.
#ifndef PSTRAIN_WORKER_MODELS_TEST_MODELS_H_
#define PSTRAIN_WORKER_MODELS_TEST_MODELS_H_

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "common/job_spec.h"
#include "common/params.h"
#include "worker/data/batch.h"

namespace pstrain {
namespace testing {

using Buffers = std::vector<std::vector<float>>;

// A GPT of `layers` blocks, width 8, 2 heads, context 5.
inline JobSpec TinyGpt(int layers) {
  JobSpec job;
  job.mutable_model()->set_kind(GPT);
  GptSpec* gpt = job.mutable_model()->mutable_gpt();
  gpt->set_layers(layers);
  gpt->set_heads(2);
  gpt->set_width(8);
  gpt->set_context(5);
  job.set_clocks(1);
  ApplyJobDefaults(&job);
  return job;
}

// Every parameter of `model`: its initial value under `seed` plus noise.
inline Buffers NoisyWeights(const ModelSpec& model, uint64_t seed = 3) {
  std::mt19937 rng(11);
  std::normal_distribution<float> noise(0, 0.3f);
  Buffers w;
  for (const ParamInfo& p : ModelParams(model)) {
    std::vector<float>& v = w.emplace_back(p.numel);
    for (int64_t i = 0; i < p.numel; ++i) v[i] = InitialValue(seed, p, i) + noise(rng);
  }
  return w;
}

// `rows` sequences of random bytes and random next bytes.
inline Batch RandomTokens(int rows, int context, uint32_t seed = 3) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  Batch b;
  b.rows = rows;
  for (int i = 0; i < rows * context; ++i) b.tokens.push_back(byte(rng));
  for (int i = 0; i < rows * context; ++i) b.labels.push_back(byte(rng));
  return b;
}

// max |a - b| / max |a| over every value.
inline double MaxRelativeDifference(const Buffers& a, const Buffers& b) {
  double scale = 0, diff = 0;
  for (size_t p = 0; p < a.size() && p < b.size(); ++p) {
    for (size_t i = 0; i < a[p].size() && i < b[p].size(); ++i) {
      scale = std::max(scale, std::abs(static_cast<double>(a[p][i])));
      diff = std::max(diff, std::abs(static_cast<double>(a[p][i]) - b[p][i]));
    }
  }
  return scale > 0 ? diff / scale : diff;
}

}  // namespace testing
}  // namespace pstrain

#endif  // PSTRAIN_WORKER_MODELS_TEST_MODELS_H_
