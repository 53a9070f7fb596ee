// Training and test sets in memory, and the data order: a function of
// (seed, epoch) over the whole training set, of which each clock's global
// batch is split among the workers by rank.
#ifndef PSTRAIN_WORKER_DATASET_H_
#define PSTRAIN_WORKER_DATASET_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"

namespace pstrain {

struct Dataset {
  int64_t size = 0;
  int dim = 0;
  int classes = 0;
  std::vector<float> features;  // [size, dim]
  std::vector<int32_t> labels;  // [size]
};

struct TrainTest {
  Dataset train;
  Dataset test;
};

// Loads the data set a completed job spec names: Fashion-MNIST's four IDX
// files from data.path (pixels scaled to [0, 1]), or the synthetic set.
absl::StatusOr<TrainTest> LoadDataset(const JobSpec& job);

// A seeded classification set: `classes` Gaussian clusters in `dim` features.
TrainTest MakeSynthetic(const DataSpec& spec, uint64_t seed);

// The data order of one epoch: a permutation of [0, n) from (seed, epoch).
std::vector<int64_t> EpochOrder(uint64_t seed, int64_t epoch, int64_t n);

// Positions [begin, end) of the global batch that rank `rank` of `workers`
// takes: as even a split as possible, in rank order.
std::pair<int, int> RankSlice(int batch, int workers, int rank);

// Picks the training examples of clock `clock` for one rank, caching the
// current epoch's order.
class BatchSampler {
 public:
  BatchSampler(uint64_t seed, int64_t train_size, int batch, int64_t clocks_per_epoch)
      : seed_(seed), train_size_(train_size), batch_(batch), clocks_per_epoch_(clocks_per_epoch) {}
  // Indices of the training examples rank `rank` of `workers` uses at `clock`.
  std::vector<int64_t> Indices(int64_t clock, int workers, int rank);
  int64_t Epoch(int64_t clock) const { return clock / clocks_per_epoch_; }

 private:
  uint64_t seed_;
  int64_t train_size_;
  int batch_;
  int64_t clocks_per_epoch_;
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> order_;
};

// Copies examples `indices` of `data` into x [n, dim] and y [n].
void Gather(const Dataset& data, const std::vector<int64_t>& indices, std::vector<float>* x,
            std::vector<int32_t>* y);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_DATASET_H_
