// The scheduler's job spec reader: text format, defaults, validation, and
// what the daemons then derive from a valid spec (partition, clocks).
#include <cstdint>
#include <string>

#include "common/job_sizes.h"
#include "common/job_spec.h"
#include "common/params.h"
#include "common/partition.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstrain;
  absl::StatusOr<JobSpec> job =
      ParseJobSpecText(std::string(reinterpret_cast<const char*>(data), size), "fuzz.pbtxt");
  if (!job.ok()) return 0;
  ApplyJobDefaults(&*job);
  if (!ValidateJobSpec(*job).ok()) return 0;
  // A valid spec is one the daemons can run: it partitions, and its clocks
  // are counted.
  const int64_t params = [&] {
    int64_t n = 0;
    for (const ParamInfo& p : ModelParams(job->model())) n += p.numel;
    return n;
  }();
  if (params <= (int64_t{1} << 24)) {
    if (!Partition::Make(ModelParams(job->model()), job->chunk_bytes(), job->num_servers()).ok()) {
      __builtin_trap();
    }
  }
  if (TotalClocks(*job) < 0 || ClocksPerEpoch(*job) <= 0) __builtin_trap();
  // What every worker allocates for its data set and batch is bounded.
  const WorkerFootprint f = FootprintOf(*job);
  if (f.rows < 1 || f.data_bytes < 0 || f.batch_bytes < 0 ||
      SaturatingAdd(f.data_bytes, f.batch_bytes) > kMaxWorkerHostBytes ||
      SaturatingMul(f.rows, f.row_elements) > kMaxBatchElements) {
    __builtin_trap();
  }
  return 0;
}
