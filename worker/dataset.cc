#include "worker/dataset.h"

#include <cmath>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/idx.h"

namespace pstrain {
namespace {

uint64_t Mix(uint64_t a, uint64_t b) {
  uint64_t x = a ^ (b + 0x9e3779b97f4a7c15ULL + (a << 6) + (a >> 2));
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

absl::StatusOr<Dataset> LoadIdxPair(const std::string& dir, const std::string& images_name,
                                    const std::string& labels_name) {
  const std::string images_path = absl::StrCat(dir, "/", images_name);
  const std::string labels_path = absl::StrCat(dir, "/", labels_name);
  ASSIGN_OR_RETURN(IdxArray images, ReadIdx(images_path));
  ASSIGN_OR_RETURN(IdxArray labels, ReadIdx(labels_path));
  if (images.dims.size() != 3 || labels.dims.size() != 1 || images.dims[0] != labels.dims[0]) {
    return absl::DataLossError(absl::StrCat(images_path, " and ", labels_path,
                                            ": shapes do not match an image set"));
  }
  Dataset d;
  d.size = images.dims[0];
  d.dim = static_cast<int>(images.dims[1] * images.dims[2]);
  d.classes = 10;
  d.features.resize(images.data.size());
  for (size_t i = 0; i < images.data.size(); ++i) d.features[i] = images.data[i] / 255.0f;
  d.labels.resize(d.size);
  for (int64_t i = 0; i < d.size; ++i) {
    if (labels.data[i] >= d.classes) {
      return absl::DataLossError(absl::StrCat(labels_path, ": label ", int{labels.data[i]},
                                              " at ", i, " is not in [0, 10)"));
    }
    d.labels[i] = labels.data[i];
  }
  return d;
}

}  // namespace

absl::StatusOr<TrainTest> LoadDataset(const JobSpec& job) {
  const DataSpec& spec = job.data();
  if (spec.dataset() == SYNTHETIC) return MakeSynthetic(spec, job.seed());
  TrainTest out;
  ASSIGN_OR_RETURN(out.train, LoadIdxPair(spec.path(), "train-images-idx3-ubyte.gz",
                                          "train-labels-idx1-ubyte.gz"));
  ASSIGN_OR_RETURN(out.test, LoadIdxPair(spec.path(), "t10k-images-idx3-ubyte.gz",
                                         "t10k-labels-idx1-ubyte.gz"));
  return out;
}

TrainTest MakeSynthetic(const DataSpec& spec, uint64_t seed) {
  const int dim = spec.synthetic_dim();
  const int classes = spec.synthetic_classes();
  std::mt19937_64 rng(Mix(seed, 0x5eed));
  // Box-Muller keeps the values the same on every standard library.
  auto uniform = [&rng] { return (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53; };
  auto normal = [&] {
    return std::sqrt(-2.0 * std::log(uniform())) * std::cos(2.0 * M_PI * uniform());
  };
  std::vector<float> centers(static_cast<size_t>(classes) * dim);
  for (float& c : centers) c = static_cast<float>(1.5 * normal());
  auto make = [&](int64_t n) {
    Dataset d;
    d.size = n;
    d.dim = dim;
    d.classes = classes;
    d.features.resize(static_cast<size_t>(n) * dim);
    d.labels.resize(n);
    for (int64_t i = 0; i < n; ++i) {
      const int label = static_cast<int>(rng() % classes);
      d.labels[i] = label;
      for (int j = 0; j < dim; ++j) {
        d.features[i * dim + j] = centers[label * dim + j] + static_cast<float>(normal());
      }
    }
    return d;
  };
  TrainTest out;
  out.train = make(spec.synthetic_train_size());
  out.test = make(spec.synthetic_test_size());
  return out;
}

std::vector<int64_t> EpochOrder(uint64_t seed, int64_t epoch, int64_t n) {
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  std::mt19937_64 rng(Mix(seed, static_cast<uint64_t>(epoch)));
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

std::pair<int, int> RankSlice(int batch, int workers, int rank) {
  const int64_t begin = static_cast<int64_t>(batch) * rank / workers;
  const int64_t end = static_cast<int64_t>(batch) * (rank + 1) / workers;
  return {static_cast<int>(begin), static_cast<int>(end)};
}

std::vector<int64_t> BatchSampler::Indices(int64_t clock, int workers, int rank) {
  const int64_t epoch = Epoch(clock);
  if (epoch != cached_epoch_) {
    order_ = EpochOrder(seed_, epoch, train_size_);
    cached_epoch_ = epoch;
  }
  const int64_t first = (clock % clocks_per_epoch_) * batch_;
  const auto [begin, end] = RankSlice(batch_, workers, rank);
  return std::vector<int64_t>(order_.begin() + first + begin, order_.begin() + first + end);
}

void Gather(const Dataset& data, const std::vector<int64_t>& indices, std::vector<float>* x,
            std::vector<int32_t>* y) {
  x->resize(indices.size() * data.dim);
  y->resize(indices.size());
  for (size_t i = 0; i < indices.size(); ++i) {
    std::memcpy(x->data() + i * data.dim, data.features.data() + indices[i] * data.dim,
                data.dim * sizeof(float));
    (*y)[i] = data.labels[indices[i]];
  }
}

}  // namespace pstrain
