#include "common/job_sizes.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace {

// The data set in a worker's memory: features and labels (4 bytes each)
// of every example, and an epoch's order of the training examples.
int64_t DataBytes(const JobSpec& job) {
  const DataSpec& data = job.data();
  switch (data.dataset()) {
    case SYNTHETIC: {
      const int64_t examples = SaturatingAdd(data.synthetic_train_size(), data.synthetic_test_size());
      const int64_t row = SaturatingMul(4, SaturatingAdd(data.synthetic_dim(), 1));
      return SaturatingAdd(SaturatingMul(examples, row), SaturatingMul(8, TrainSetSize(job)));
    }
    case TEXT:  // the corpus: its size is the file's
    case EXTERNAL_DATA:  // the workers' own (a script's)
      return 0;
    default:
      return kFashionMnistExamples * (kFashionMnistDim + 1) * 4 + TrainSetSize(job) * 8;
  }
}

// The widest tensor per batch row: an MLP's widest layer (its batch is not
// split), a GPT's sequence of tokens (its activations are, under
// --device_memory_budget).
int64_t RowElements(const JobSpec& job) {
  const ModelSpec& model = job.model();
  if (model.kind() == EXTERNAL) return 1;  // the script's batches are its own
  if (model.kind() == GPT) return std::max(1, model.gpt().context());
  int64_t widest = std::max(1, model.input_dim());
  for (const LayerSpec& layer : model.layers()) widest = std::max<int64_t>(widest, layer.units());
  return widest;
}

// Host bytes per batch row: an MLP's features, label and index; a GPT's
// tokens and next tokens.
int64_t RowBytes(const JobSpec& job) {
  if (job.model().kind() == EXTERNAL) return 0;
  if (job.model().kind() == GPT) return SaturatingMul(8, std::max(1, job.model().gpt().context()));
  return SaturatingAdd(SaturatingMul(4, SaturatingAdd(job.model().input_dim(), 1)), 8);
}

}  // namespace

int64_t SaturatingMul(int64_t a, int64_t b) {
  int64_t out = 0;
  return __builtin_mul_overflow(a, b, &out) ? std::numeric_limits<int64_t>::max() : out;
}

int64_t SaturatingAdd(int64_t a, int64_t b) {
  int64_t out = 0;
  return __builtin_add_overflow(a, b, &out) ? std::numeric_limits<int64_t>::max() : out;
}

int64_t TrainSetSize(const JobSpec& job) {
  switch (job.data().dataset()) {
    case SYNTHETIC:
      return job.data().synthetic_train_size();
    case EXTERNAL_DATA:  // the workers' own: the first worker's count (0 before)
      return job.data().train_size();
    case TEXT:  // windows drawn at random: as many as the job uses
      return SaturatingMul(std::max<int64_t>(1, job.clocks()), std::max(1, job.batch_size()));
    default:
      return kFashionMnistTrain;
  }
}

int64_t ClocksPerEpoch(const JobSpec& job) {
  return std::max<int64_t>(1, TrainSetSize(job) / std::max(1, job.batch_size()));
}

int64_t TotalClocks(const JobSpec& job) {
  if (job.clocks() > 0) return job.clocks();
  return static_cast<int64_t>(job.epochs()) * ClocksPerEpoch(job);
}

WorkerFootprint FootprintOf(const JobSpec& job) {
  const int64_t replicas =
      std::max(1, job.num_workers() / std::max(1, job.pipeline_stages()));
  WorkerFootprint f;
  f.data_bytes = DataBytes(job);
  f.rows = (std::max<int64_t>(0, job.batch_size()) + replicas - 1) / replicas;
  f.row_elements = RowElements(job);
  f.batch_bytes = SaturatingMul(f.rows, RowBytes(job));
  return f;
}

int64_t TableFixedBytes(const TableSpec& table) {
  return table.admit_after() >= 2 ? kAdmissionFilterBytes : 0;
}

namespace {

absl::Status ValidateTableSizes(const JobSpec& job) {
  if (job.tables_size() > kMaxTables) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job spec: tables (", job.tables_size(), ") are more than the ", kMaxTables,
        " a job may declare (each costs every server its part, an admission filter too)"));
  }
  for (const TableSpec& t : job.tables()) {
    auto bad = [&t](auto&&... parts) {
      return absl::InvalidArgumentError(
          absl::StrCat("job spec: table '", t.name(), "': ", parts...));
    };
    if (t.num_ids() > kMaxNumIds) {
      return bad("num_ids (", t.num_ids(), ") is beyond 2^63: ids are int64 >= 0 (0: any id)");
    }
    const int64_t budget = t.memory_budget_bytes();
    if (budget > kMaxTableBudgetBytes) {
      return bad("memory_budget_bytes (", budget, ") is beyond ", kMaxTableBudgetBytes,
                 " bytes (1 TiB) a server");
    }
    const int64_t row = int64_t{4} * t.width() * (1 + kMaxRowStateFloatsPerWeight) +
                        kRowBookkeepingBytes;
    if (budget > 0 && budget < TableFixedBytes(t) + row) {
      return bad("memory_budget_bytes (", budget, ") must hold the table's admission filter (",
                 TableFixedBytes(t), " bytes) and one row with its state (", row,
                 " bytes): the budget bounds all of the table's memory on a server");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateJobSizes(const JobSpec& job) {
  if (const absl::Status st = ValidateTableSizes(job); !st.ok()) return st;
  auto bad = [](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat("job spec: ", parts...));
  };
  const WorkerFootprint f = FootprintOf(job);
  const std::string limit = absl::StrCat(kMaxWorkerHostBytes, " bytes (64 GiB)");
  if (f.data_bytes > kMaxWorkerHostBytes) {
    const DataSpec& d = job.data();
    return bad("data.synthetic_train_size (", d.synthetic_train_size(), ") and synthetic_test_size (",
               d.synthetic_test_size(), ") examples of synthetic_dim (", d.synthetic_dim(),
               ") features make a data set of ", f.data_bytes, " bytes in every worker; at most ",
               limit, " are allowed");
  }
  if (SaturatingMul(f.rows, f.row_elements) > kMaxBatchElements) {
    return bad("batch_size (", job.batch_size(), ") gives a worker ", f.rows, " rows of ",
               f.row_elements, job.model().kind() == GPT ? " tokens" : " values (the widest layer)",
               ": more than the ", kMaxBatchElements, " elements a batch tensor may have");
  }
  if (SaturatingAdd(f.data_bytes, f.batch_bytes) > kMaxWorkerHostBytes) {
    return bad("batch_size (", job.batch_size(), ") gives a worker ", f.rows, " rows: ",
               f.batch_bytes, " bytes of batch beside ", f.data_bytes,
               " of data set; at most ", limit, " are allowed");
  }
  return absl::OkStatus();
}

}  // namespace pstrain
