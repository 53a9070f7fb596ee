#include "worker/data/dataset.h"

#include <cmath>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/data/idx.h"

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

// The bytes of `path`: a file, or a folder's files with no dot in their
// names, concatenated in name order.
absl::StatusOr<std::string> ReadCorpus(const std::string& path) {
  std::error_code ec;
  std::vector<std::string> files;
  if (std::filesystem::is_directory(path, ec)) {
    for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.find('.') == std::string::npos && entry.is_regular_file(ec)) {
        files.push_back(entry.path().string());
      }
    }
    if (ec) return absl::NotFoundError(absl::StrCat(path, ": cannot list: ", ec.message()));
    std::sort(files.begin(), files.end());
    if (files.empty()) {
      return absl::NotFoundError(absl::StrCat(path, ": no corpus files (names without a dot)"));
    }
  } else if (std::filesystem::is_regular_file(path, ec)) {
    files.push_back(path);
  } else {
    return absl::NotFoundError(absl::StrCat("corpus ", path, " does not exist"));
  }
  std::string text;
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat(f, ": cannot open"));
    text.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (in.bad()) return absl::DataLossError(absl::StrCat(f, ": read error"));
  }
  return text;
}

}  // namespace

static absl::StatusOr<TrainTest> LoadText(const JobSpec& job) {
  const DataSpec& spec = job.data();
  ASSIGN_OR_RETURN(std::string text, ReadCorpus(spec.path()));
  const int64_t context = job.model().gpt().context();
  const int64_t held_out = static_cast<int64_t>(text.size() * spec.validation_fraction());
  const int64_t train = static_cast<int64_t>(text.size()) - held_out;
  if (held_out < context + 1 || train < context + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "corpus ", spec.path(), " has ", text.size(), " bytes: too few for windows of ",
        context + 1, " bytes in both the training and the validation part"));
  }
  TrainTest out;
  out.validation_text = text.substr(train);
  text.resize(train);
  out.train_text = std::move(text);
  return out;
}

absl::StatusOr<TrainTest> LoadDataset(const JobSpec& job) {
  const DataSpec& spec = job.data();
  if (spec.dataset() == SYNTHETIC) return MakeSynthetic(spec, job.seed());
  if (spec.dataset() == TEXT) return LoadText(job);
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

std::pair<int, int> EvenSlice(int batch, int num_shares, int share_index) {
  const int64_t begin = static_cast<int64_t>(batch) * share_index / num_shares;
  const int64_t end = static_cast<int64_t>(batch) * (share_index + 1) / num_shares;
  return {static_cast<int>(begin), static_cast<int>(end)};
}

std::vector<int64_t> BatchSampler::Indices(int64_t clock, int num_shares, int share_index) {
  const int64_t epoch = Epoch(clock);
  if (epoch != cached_epoch_) {
    order_ = EpochOrder(seed_, epoch, train_size_);
    cached_epoch_ = epoch;
  }
  const int64_t first = (clock % clocks_per_epoch_) * batch_;
  const auto [begin, end] = EvenSlice(batch_, num_shares, share_index);
  return std::vector<int64_t>(order_.begin() + first + begin, order_.begin() + first + end);
}

void Gather(const Dataset& data, const std::vector<int64_t>& indices, Batch* batch) {
  batch->rows = static_cast<int>(indices.size());
  batch->x.resize(indices.size() * data.dim);
  batch->labels.resize(indices.size());
  for (size_t i = 0; i < indices.size(); ++i) {
    std::memcpy(batch->x.data() + i * data.dim, data.features.data() + indices[i] * data.dim,
                data.dim * sizeof(float));
    batch->labels[i] = data.labels[indices[i]];
  }
}

namespace {

// Window starting at `at` into `out`'s row `row`.
void PutWindow(const std::string& text, int context, int64_t at, int row, Batch* out) {
  for (int j = 0; j < context; ++j) {
    out->tokens[static_cast<size_t>(row) * context + j] = static_cast<uint8_t>(text[at + j]);
    out->labels[static_cast<size_t>(row) * context + j] = static_cast<uint8_t>(text[at + j + 1]);
  }
}

}  // namespace

void TextBatch(const std::string& text, int context, uint64_t seed, int64_t clock, int batch,
               int num_shares, int share_index, Batch* out) {
  const auto [begin, end] = EvenSlice(batch, num_shares, share_index);
  out->rows = end - begin;
  out->tokens.resize(static_cast<size_t>(out->rows) * context);
  out->labels.resize(out->tokens.size());
  const uint64_t starts = text.size() - context;  // windows of context + 1 bytes
  for (int i = begin; i < end; ++i) {
    const uint64_t at = Mix(Mix(seed, static_cast<uint64_t>(clock)), i) % starts;
    PutWindow(text, context, static_cast<int64_t>(at), i - begin, out);
  }
}

int64_t TextWindows(const std::string& text, int context) {
  return (static_cast<int64_t>(text.size()) - 1) / context;
}

void TextSlice(const std::string& text, int context, int64_t first, int count, Batch* out) {
  out->rows = count;
  out->tokens.resize(static_cast<size_t>(count) * context);
  out->labels.resize(out->tokens.size());
  for (int i = 0; i < count; ++i) PutWindow(text, context, (first + i) * context, i, out);
}

double UnigramEntropy(const std::string& text) {
  std::vector<int64_t> counts(256, 0);
  for (unsigned char b : text) ++counts[b];
  double h = 0;
  for (int64_t c : counts) {
    if (c == 0) continue;
    const double p = static_cast<double>(c) / text.size();
    h -= p * std::log(p);
  }
  return h;
}

}  // namespace pstrain
