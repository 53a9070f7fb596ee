#include "common/job_validate_tables.h"

#include <cmath>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/job_optimizer.h"

namespace pstrain {
namespace {

// INVALID_ARGUMENT "job spec: table 'NAME': <parts>".
template <typename... Parts>
absl::Status TableError(const TableSpec& t, const Parts&... parts) {
  return absl::InvalidArgumentError(absl::StrCat("job spec: table '", t.name(), "': ", parts...));
}

bool ValidTableName(const std::string& name) {
  return !name.empty() && name.size() <= 64 &&
         name.find_first_not_of(
             "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
             "0123456789_.-") == std::string::npos;
}

// A table's optimizer: one with a row-wise form, without what rows cannot
// take.
absl::Status ValidateTableOptimizer(const TableSpec& t) {
  const OptimizerSpec& opt = t.optimizer();
  if (opt.type() != SGD && opt.type() != ADAGRAD && opt.type() != ADAM) {
    return TableError(t, "optimizer.type must be SGD, ADAGRAD or ADAM, got ",
                      OptimizerType_Name(opt.type()));
  }
  if (opt.weight_decay() != 0 || opt.clip_norm() != 0 || opt.schedule().type() != CONSTANT) {
    return TableError(t, "a table's optimizer takes no weight_decay, clip_norm or schedule");
  }
  if (opt.allow_nonfinite()) {
    return TableError(t,
                      "a table's optimizer takes no allow_nonfinite: the job's "
                      "optimizer.allow_nonfinite covers the tables too (one rule for every "
                      "gradient)");
  }
  if (const absl::Status st = ValidateOptimizer(opt); !st.ok()) {
    return TableError(t, st.message().substr(std::string_view("job spec: ").size()));
  }
  return absl::OkStatus();
}

// One table's fields after its name.
absl::Status ValidateTable(const TableSpec& t) {
  if (t.width() < 1 || t.width() > 65536) {
    return TableError(t, "width must be in [1, 65536], got ", t.width());
  }
  if (t.memory_budget_bytes() < 0) return TableError(t, "memory_budget_bytes must be >= 0");
  if (t.admit_after() < 0 || t.admit_after() > 255) {
    return TableError(t, "admit_after must be in [0, 255], got ", t.admit_after());
  }
  if (t.expire_after_clocks() < 0) {
    return TableError(t, "expire_after_clocks must be >= 0, got ", t.expire_after_clocks());
  }
  if (!(t.init_scale() >= 0 && std::isfinite(t.init_scale()))) {
    return TableError(t, "init_scale must be finite and >= 0");
  }
  return ValidateTableOptimizer(t);
}

}  // namespace

absl::Status ValidateTables(const JobSpec& job) {
  if (!Consistency_IsValid(job.table_consistency())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job spec: table_consistency ", job.table_consistency(), " is unknown (BSP, SSP or ASP)"));
  }
  if (job.tables_size() > 0 && job.pipeline_stages() > 1) {
    return absl::InvalidArgumentError(
        "job spec: sparse tables with pipeline_stages > 1 are not supported yet (every worker "
        "takes part in a table's rounds)");
  }
  absl::flat_hash_set<std::string> names;
  for (const TableSpec& t : job.tables()) {
    if (!ValidTableName(t.name())) return TableError(t, "a name is 1 to 64 of [A-Za-z0-9_.-]");
    if (!names.insert(t.name()).second) return TableError(t, "declared twice");
    if (const absl::Status st = ValidateTable(t); !st.ok()) return st;
  }
  return absl::OkStatus();
}

}  // namespace pstrain
