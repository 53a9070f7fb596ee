#include "common/job_validate.h"

#include "absl/strings/str_cat.h"
#include "common/grad_codec.h"
#include "common/job_consistency.h"
#include "common/job_optimizer.h"
#include "common/job_sizes.h"
#include "common/job_validate_model.h"
#include "common/job_validate_tables.h"
#include "common/stage_plan.h"

namespace pstrain {
namespace {

// INVALID_ARGUMENT "job spec: <parts>".
template <typename... Parts>
absl::Status SpecError(const Parts&... parts) {
  return absl::InvalidArgumentError(absl::StrCat("job spec: ", parts...));
}

// The job's own fields: members, data sizes, consistency, length,
// checkpoints, logging, chunks and wire dtype.
absl::Status ValidateJobFields(const JobSpec& job) {
  if (job.num_servers() < 1 || job.num_servers() > 1024) {
    return SpecError("num_servers must be in [1, 1024], got ", job.num_servers());
  }
  if (job.num_workers() < 1 || job.num_workers() > 1024) {
    return SpecError("num_workers must be in [1, 1024], got ", job.num_workers());
  }
  if (job.data().dataset() == SYNTHETIC &&
      (job.data().synthetic_train_size() < 1 || job.data().synthetic_test_size() < 1 ||
       job.data().synthetic_dim() < 1 || job.data().synthetic_classes() < 2)) {
    return SpecError("synthetic data needs positive sizes and at least 2 classes");
  }
  const bool size_known = job.data().dataset() != EXTERNAL_DATA || job.data().train_size() > 0;
  if (size_known && job.batch_size() > TrainSetSize(job)) {
    return SpecError("batch_size (", job.batch_size(), ") exceeds the training set (",
                     TrainSetSize(job), ")");
  }
  if (job.staleness() < 0) return SpecError("staleness must be >= 0");
  if (job.checkpoint_every() < 0) {
    return SpecError("checkpoint_every must be >= 0, got ", job.checkpoint_every());
  }
  if (job.checkpoint_every() > 0 && job.checkpoint_dir().empty()) {
    return SpecError("checkpoint_every needs a checkpoint_dir");
  }
  if (job.consistency() == BSP && job.staleness() != 0 && job.table_consistency() != SSP) {
    return SpecError("staleness must be 0 under BSP (use consistency: SSP)");
  }
  if (job.epochs() < 0 || job.clocks() < 0) return SpecError("epochs and clocks must be >= 0");
  if (job.clocks() == 0 && job.epochs() < 1) {
    return SpecError("epochs must be >= 1 when clocks is 0");
  }
  if (job.log_every() < 1) return SpecError("log_every must be >= 1, got ", job.log_every());
  if (job.chunk_bytes() < 4 || job.chunk_bytes() % 4 != 0 || job.chunk_bytes() > (64 << 20)) {
    return SpecError("chunk_bytes must be a multiple of 4 in [4, 64 MiB], got ", job.chunk_bytes());
  }
  return absl::OkStatus();
}

// The planned consistency switches (JobSpec.consistency_plan): the rules
// of psctl set-consistency (scheduler/operator_control.cc), checked before
// the job starts.
absl::Status ValidateConsistencyPlan(const JobSpec& job) {
  int64_t last = 0;
  for (const ConsistencyChange& c : job.consistency_plan()) {
    const std::string at = absl::StrCat("consistency_plan at clock ", c.clock(), ": ");
    if (c.clock() <= last) return SpecError(at, "clocks must ascend from 1");
    last = c.clock();
    if (absl::Status s = CheckConsistencyChange(c.consistency(), c.staleness()); !s.ok()) {
      return SpecError(at, s.message());
    }
    if (c.unix_ms() != 0) return SpecError(at, "unix_ms is the scheduler's to set");
  }
  if (job.consistency_plan_size() == 0) return absl::OkStatus();
  if (job.consistency() != BSP && job.consistency() != CONSISTENCY_UNSPECIFIED) {
    return SpecError("a consistency_plan needs a job that starts under BSP (consistency: BSP)");
  }
  if (ConsistencyIsFixed(job)) {
    return SpecError(
        "pipelined jobs and BSP jobs with clip_norm keep their consistency: "
        "no consistency_plan");
  }
  return absl::OkStatus();
}

// Stages, replicas, their shares of the batch and its micro-batches.
absl::Status ValidateReplicas(const JobSpec& job) {
  const int stages = job.pipeline_stages();
  if (const auto plan = PlanStages(job.model(), stages); !plan.ok()) return plan.status();
  if (job.num_workers() % stages != 0) {
    return SpecError("num_workers (", job.num_workers(),
                     ") must be a multiple of pipeline_stages (", stages, "): replicas x stages");
  }
  if (job.pipeline_schedule() != GPIPE && job.pipeline_schedule() != ONE_F_ONE_B) {
    return SpecError("pipeline_schedule ", job.pipeline_schedule(),
                     " is unknown (GPIPE or ONE_F_ONE_B)");
  }
  const int replicas = job.num_workers() / stages;
  const char* who = stages > 1 ? "replicas" : "num_workers";
  if (job.batch_size() < replicas) {
    return SpecError("batch_size (", job.batch_size(), ") must be at least ", who, " (", replicas,
                     ")");
  }
  const int share = job.batch_size() / replicas;
  if (job.micro_batches() < 1 || job.micro_batches() > share) {
    return SpecError("micro_batches must be in [1, batch_size / ", who, " = ", share, "], got ",
                     job.micro_batches());
  }
  if (stages > 1 && (job.batch_size() % replicas != 0 || share % job.micro_batches() != 0)) {
    return SpecError("with pipeline stages, micro_batches (", job.micro_batches(),
                     ") must divide each replica's share of the batch: batch_size (",
                     job.batch_size(), ") / replicas (", replicas, ")");
  }
  return absl::OkStatus();
}

// Standby copies of the servers' chunks (JobSpec.standby_copies).
absl::Status ValidateStandbys(const JobSpec& job) {
  if (job.standby_copies() < 0 || job.standby_copies() > 1) {
    return SpecError("standby_copies must be 0 or 1 (a standby copy of every chunk), got ",
                     job.standby_copies());
  }
  if (job.standby_copies() == 0) return absl::OkStatus();
  if (job.num_servers() < 2) {
    return SpecError(
        "standby_copies: 1 needs at least two servers (a chunk's standby is on another)");
  }
  for (const TableSpec& t : job.tables()) {
    if (t.expire_after_clocks() > 0) {
      return SpecError("standby_copies: 1 does not cover table '", t.name(),
                       "' with expire_after_clocks: a standby would need every pull's touch "
                       "(docs/failures.md)");
    }
  }
  if (job.optimizer().type() == ADAFACTOR) {
    return SpecError(
        "standby_copies: 1 needs an elementwise optimizer: Adafactor's sums over threads would "
        "make a "
        "standby's copy differ in its last bits");
  }
  if (job.consistency() == BSP && job.optimizer().clip_norm() > 0) {
    return SpecError(
        "standby_copies: 1 does not cover BSP with clip_norm (clipping by the global norm) yet");
  }
  return absl::OkStatus();
}

// Compressed pushes (JobSpec.compression): every optimizer and consistency
// takes the decoded gradients (docs/compression.md).
absl::Status ValidateCompression(const JobSpec& job) {
  if (job.compression().codec() == GradCompression::NONE) {
    return job.compression().pulls() ? SpecError("compression.pulls needs a codec")
                                     : absl::OkStatus();
  }
  if (const absl::Status st = CheckCompression(WithCompressionDefaults(job.compression()));
      !st.ok()) {
    return SpecError(st.message());
  }
  if (job.compression().pulls() && job.wire_dtype() != FP32) {
    return SpecError("compression.pulls sends fp32 values and changes: wire_dtype must be FP32");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateJobSpec(const JobSpec& job) {
  if (const absl::Status st = ValidateJobFields(job); !st.ok()) return st;
  if (const absl::Status st = ValidateConsistencyPlan(job); !st.ok()) return st;
  if (const absl::Status st = ValidateOptimizer(job.optimizer()); !st.ok()) return st;
  if (!DType_IsValid(job.wire_dtype())) {
    return SpecError("wire_dtype ", job.wire_dtype(), " is unknown");
  }
  if (const absl::Status st = ValidateModel(job); !st.ok()) return st;
  if (const absl::Status st = ValidateReplicas(job); !st.ok()) return st;
  if (const absl::Status st = ValidateTables(job); !st.ok()) return st;
  if (const absl::Status st = ValidateStandbys(job); !st.ok()) return st;
  if (const absl::Status st = ValidateCompression(job); !st.ok()) return st;
  return ValidateJobSizes(job);
}

}  // namespace pstrain
