// psctl export: the verb's glue around ExportCheckpoint (tools/export.h),
// from a running job (a checkpoint now, then its weights) or from a
// checkpoint directory. Prints what it wrote; returns psctl's exit code.
#ifndef PSTRAIN_TOOLS_PSCTL_EXPORT_H_
#define PSTRAIN_TOOLS_PSCTL_EXPORT_H_

#include <string>

#include "absl/time/time.h"

namespace pstrain {

struct ExportOptions {
  std::string out;             // the safetensors file
  std::string scheduler;       // a running job's scheduler, HOST:PORT ...
  std::string checkpoint_dir;  // ... or a checkpoint directory
  std::string job;             // its job spec ("": the one in the directory)
  absl::Duration timeout;      // for each call to the scheduler
  int wait_s = 300;            // for the checkpoint asked for
};

// 0 when `out` was written; 1 when a call or the export fails; 2 when the
// options name neither or both of scheduler and checkpoint_dir, no out,
// or a job spec that cannot be read. The checkpoint directory of a running
// job must be readable from here (the same machine or a shared file
// system).
int Export(const ExportOptions& options);

}  // namespace pstrain

#endif  // PSTRAIN_TOOLS_PSCTL_EXPORT_H_
