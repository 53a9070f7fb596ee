// `psctl plot`: the curves ps_scheduler --run_dir wrote (curves.jsonl, one
// RunPoint a line) drawn as a PNG or SVG by gnuplot (Debian's gnuplot-nox:
// a well-kept plotting program, so nothing here draws): training loss,
// accuracy (or validation loss), samples/s and every worker's clock over
// the job's clocks, one panel each.
#ifndef PSTRAIN_TOOLS_PLOT_H_
#define PSTRAIN_TOOLS_PLOT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/dashboard.pb.h"

namespace pstrain {

// The points of run_dir/curves.jsonl; INVALID_ARGUMENT naming a bad line.
absl::StatusOr<std::vector<RunPoint>> ReadCurves(const std::string& run_dir);

// Draws them into `out` (.png or .svg); the exit code, with a message on
// stderr when it fails.
int Plot(const std::string& run_dir, const std::string& out);

}  // namespace pstrain

#endif  // PSTRAIN_TOOLS_PLOT_H_
