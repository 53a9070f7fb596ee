// bench/chaos: the chaos run of tests/chaos.h for as long as asked, over
// one seed or many, with its numbers as JSON: per run the faults by kind,
// recovery times (from the fault until the slowest worker's clock moved
// past it again), restarts, and whether the final weights are
// bit-identical to the undisturbed run's; over the runs, how many were. A
// run that is not bit-identical (or did not exit 0) keeps both runs' logs,
// checkpoints and weights in its folder; the others' folders are removed
// unless --keep_all.
//
//   bazel run -c opt //bench:chaos -- --minutes=30 [--seed=N] [--slowdown_ms=15]
//       [--standby_copies=1]
//   bazel-bin/bench/chaos --seeds=30 --minutes=1 [--seed=N] [--standby_copies=1] [--dir=DIR]
//
// Exit 0 when every run ended DONE with bit-identical weights, else 1.
#include "tests/chaos.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "tests/cluster.h"

ABSL_FLAG(double, minutes, 3, "how long each disturbed run trains, roughly");
ABSL_FLAG(uint32_t, seed, 0, "the first run's seed (the job's and the faults'); 0: a fresh one");
ABSL_FLAG(int, seeds, 1, "runs, of seeds seed, seed + 1, ...");
ABSL_FLAG(int, slowdown_ms, 15, "each worker's sleep per clock (sets the clock's length)");
ABSL_FLAG(int, standby_copies, 0, "1: standby copies (a server's death promotes its standby)");
ABSL_FLAG(std::string, dir, "", "where the runs' folders go (default: a fresh folder in /tmp)");
ABSL_FLAG(bool, keep_all, false, "keep every run's folder, bit-identical ones too");

namespace {

using pstrain::testing::ChaosOptions;
using pstrain::testing::ChaosReport;

// One run of `seed` in `dir`/seed-<seed>: its report (an error when a run
// could not be started). A run that ended DONE bit-identical leaves no
// folder unless --keep_all.
absl::StatusOr<ChaosReport> RunSeed(uint32_t seed, const std::string& dir) {
  ChaosOptions o;
  o.seed = seed;
  o.slowdown_ms = absl::GetFlag(FLAGS_slowdown_ms);
  o.standby = absl::GetFlag(FLAGS_standby_copies) > 0;
  // A clock costs the sleep plus ~5 ms here; about a third of the run goes
  // to recoveries.
  o.clocks = static_cast<int64_t>(absl::GetFlag(FLAGS_minutes) * 60e3 / (o.slowdown_ms + 5) * 0.65);
  o.dir = absl::StrCat(dir, "/seed-", seed);
  std::filesystem::create_directories(o.dir);
  std::fprintf(stderr, "chaos: seed %u, %lld clocks, logs in %s\n", o.seed,
               static_cast<long long>(o.clocks), o.dir.c_str());
  absl::StatusOr<ChaosReport> r = pstrain::testing::RunChaos(o);
  if (r.ok() && r->exit_code == 0 && r->bit_identical && !absl::GetFlag(FLAGS_keep_all)) {
    std::error_code error;
    std::filesystem::remove_all(o.dir, error);
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  pstrain::LogToStderr();
  absl::ParseCommandLine(argc, argv);
  uint32_t seed = absl::GetFlag(FLAGS_seed);
  if (seed == 0) seed = std::random_device{}();
  const std::string dir = absl::GetFlag(FLAGS_dir).empty()
                              ? pstrain::testing::NewTempDir("pstrain-chaos")
                              : absl::GetFlag(FLAGS_dir);
  std::vector<std::string> runs, divergent;
  int identical = 0;
  size_t faults = 0;
  double worst = 0;
  const absl::Time start = absl::Now();
  for (int i = 0; i < absl::GetFlag(FLAGS_seeds); ++i) {
    const absl::StatusOr<ChaosReport> r = RunSeed(seed + i, dir);
    if (!r.ok()) {
      std::fprintf(stderr, "chaos: seed %u: %s\n", seed + i,
                   std::string(r.status().message()).c_str());
      divergent.push_back(absl::StrCat(seed + i));
      continue;
    }
    runs.push_back(r->json);
    faults += r->faults.size();
    for (const pstrain::testing::Fault& f : r->faults) worst = std::max(worst, f.recovery_s);
    if (r->exit_code == 0 && r->bit_identical) {
      ++identical;
    } else {
      divergent.push_back(absl::StrCat(seed + i));
    }
  }
  std::printf(
      "{\"first_seed\": %u, \"seeds\": %d, \"standby_copies\": %d, \"bit_identical_runs\": %d, "
      "\"faults\": %zu, \"worst_recovery_s\": %g, \"minutes\": %.1f, \"dir\": \"%s\", "
      "\"not_identical_seeds\": [%s], \"runs\": [%s]}\n",
      seed, absl::GetFlag(FLAGS_seeds), absl::GetFlag(FLAGS_standby_copies), identical, faults,
      worst, absl::ToDoubleMinutes(absl::Now() - start), dir.c_str(),
      absl::StrJoin(divergent, ", ").c_str(), absl::StrJoin(runs, ", ").c_str());
  return identical == absl::GetFlag(FLAGS_seeds) ? 0 : 1;
}
