// Training and test sets in memory, and the data order: a function of
// (seed, epoch) over the whole training set, of which each clock's global
// batch is split among the workers by share (a worker's share `share_index` of
// `num_shares`: its position among the live workers).
#ifndef PSTRAIN_WORKER_DATA_DATASET_H_
#define PSTRAIN_WORKER_DATA_DATASET_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "worker/data/batch.h"

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
  // TEXT: the corpus' training and held-out (validation) bytes.
  std::string train_text, validation_text;
};

// Loads the data set a completed job spec names: Fashion-MNIST's four IDX
// files from data.path (pixels scaled to [0, 1]), the synthetic set, or a
// TEXT corpus (data.path a file, or a folder whose files with no dot in their
// names are read in name order; the last validation_fraction held out).
absl::StatusOr<TrainTest> LoadDataset(const JobSpec& job);

// A seeded classification set: `classes` Gaussian clusters in `dim` features.
TrainTest MakeSynthetic(const DataSpec& spec, uint64_t seed);

// The data order of one epoch: a permutation of [0, n) from (seed, epoch).
std::vector<int64_t> EpochOrder(uint64_t seed, int64_t epoch, int64_t n);

// Positions [begin, end) of the global batch that share `share_index` of
// `num_shares` takes: as even a split as possible, in order of share_index.
std::pair<int, int> EvenSlice(int batch, int num_shares, int share_index);

// Picks the training examples of clock `clock` for one share, caching the
// current epoch's order.
class BatchSampler {
 public:
  BatchSampler(uint64_t seed, int64_t train_size, int batch, int64_t clocks_per_epoch)
      : seed_(seed), train_size_(train_size), batch_(batch), clocks_per_epoch_(clocks_per_epoch) {}
  // Indices of the training examples share `share_index` of `num_shares` uses at
  // `clock`.
  std::vector<int64_t> Indices(int64_t clock, int num_shares, int share_index);
  int64_t Epoch(int64_t clock) const { return clock / clocks_per_epoch_; }

 private:
  uint64_t seed_;
  int64_t train_size_;
  int batch_;
  int64_t clocks_per_epoch_;
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> order_;
};

// Copies examples `indices` of `data` into batch->x [n, dim] and
// batch->labels [n].
void Gather(const Dataset& data, const std::vector<int64_t>& indices, Batch* batch);

// The windows of `context` + 1 bytes share `share_index` of `num_shares` trains on
// at `clock`: window i of the global batch starts at a position drawn from
// (seed, clock, i), so the union does not depend on the number of workers.
// Tokens are a window's first `context` bytes, labels its last `context`.
void TextBatch(const std::string& text, int context, uint64_t seed, int64_t clock, int batch,
               int num_shares, int share_index, Batch* out);

// Sequences [first, first + count) of the non-overlapping windows of
// `text` (window i starts at i * context), as a batch.
int64_t TextWindows(const std::string& text, int context);
void TextSlice(const std::string& text, int context, int64_t first, int count, Batch* out);

// The entropy in nats of the byte distribution of `text`: the loss of the
// best model that ignores context.
double UnigramEntropy(const std::string& text);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_DATA_DATASET_H_
