// Reading, completing and checking the job spec (proto/job.proto).
#ifndef PSTRAIN_COMMON_JOB_SPEC_H_
#define PSTRAIN_COMMON_JOB_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"

namespace pstrain {

// Parses a text-format JobSpec. Errors name the file, line and column:
// "job.pbtxt:3:7: Expected integer, got: foo"; a field renamed since is
// named with its new name: "job.pbtxt:5:1: field "steps" is now "clocks"".
absl::StatusOr<JobSpec> ParseJobSpecText(const std::string& text,
                                         const std::string& file_name);
absl::StatusOr<JobSpec> LoadJobSpec(const std::string& path);

// Fills every unset field with its documented default (proto/job.proto).
void ApplyJobDefaults(JobSpec* job);

// Checks a completed spec for values no job can run with; INVALID_ARGUMENT
// naming the field otherwise.
absl::Status ValidateJobSpec(const JobSpec& job);

// Size of the training set the spec names (60000 for Fashion-MNIST), known
// without reading it.
int64_t TrainSetSize(const JobSpec& job);
// Clocks per epoch (the last partial batch of an epoch is dropped).
int64_t ClocksPerEpoch(const JobSpec& job);
// Total clocks of the job: `clocks` if set, else epochs * ClocksPerEpoch.
int64_t TotalClocks(const JobSpec& job);
// The bound s of the gate and the read guarantee; -1 means unbounded (ASP).
int64_t EffectiveStaleness(const JobSpec& job);
// The read guarantee for iteration `clock`: updates of iterations < this value
// must be applied before the read (0 when nothing is required).
int64_t MinClockForRead(const JobSpec& job, int64_t clock);
// The sparse tables' consistency (JobSpec.table_consistency, else the
// job's), fixed for the job, and the read guarantee of a pull of rows for
// iteration `clock` under it.
Consistency TableConsistency(const JobSpec& job);
int64_t TableMinClockForRead(const JobSpec& job, int64_t clock);

// The consistency of each iteration of a running job: the spec's, then each
// change (psctl set-consistency) from its clock on.
class ConsistencySchedule {
 public:
  explicit ConsistencySchedule(const JobSpec& job);
  // The changes so far, oldest first (ClusterStatus.consistency_changes).
  void Set(std::vector<ConsistencyChange> changes) { changes_ = std::move(changes); }
  const std::vector<ConsistencyChange>& changes() const { return changes_; }

  Consistency ConsistencyAt(int64_t clock) const;
  // The gate's and the read guarantee's bound for iteration `clock`; -1: none.
  int64_t StalenessAt(int64_t clock) const;
  // As MinClockForRead(job, clock), with the bound in force at `clock`.
  int64_t MinClockForRead(int64_t clock) const;
  // The newest mode asked for (the spec's when none).
  ConsistencyChange Latest() const;

 private:
  const ConsistencyChange* At(int64_t clock) const;  // null: the spec's

  ConsistencyChange base_;
  std::vector<ConsistencyChange> changes_;
};

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_JOB_SPEC_H_
