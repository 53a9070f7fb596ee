// bench/chaos: the chaos run of tests/chaos.h for as long as asked, with
// its numbers as JSON: faults by kind, recovery times (from the fault until
// the slowest worker's clock moved past it again), restarts, whether the
// final weights are bit-identical to the undisturbed run's.
//
//   bazel run -c opt //bench:chaos -- --minutes=30 [--seed=N] [--slowdown_ms=15]
//       [--replicas=1]
#include "tests/chaos.h"

#include <cstdio>
#include <random>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "tests/cluster.h"

ABSL_FLAG(double, minutes, 3, "how long the disturbed run trains, roughly");
ABSL_FLAG(uint32_t, seed, 0, "the faults' seed (0: a fresh one)");
ABSL_FLAG(int, slowdown_ms, 15, "each worker's sleep per clock (sets the clock's length)");
ABSL_FLAG(int, replicas, 0, "1: standby replicas (a server's death promotes its standby)");
ABSL_FLAG(std::string, dir, "", "where the runs' logs go (default: a fresh folder in /tmp)");

int main(int argc, char** argv) {
  pstrain::LogToStderr();
  absl::ParseCommandLine(argc, argv);
  pstrain::testing::ChaosOptions o;
  o.seed = absl::GetFlag(FLAGS_seed);
  if (o.seed == 0) o.seed = std::random_device{}();
  o.slowdown_ms = absl::GetFlag(FLAGS_slowdown_ms);
  o.replicas = absl::GetFlag(FLAGS_replicas) > 0;
  // A clock costs the sleep plus ~5 ms here; about a third of the run goes
  // to recoveries.
  o.clocks = static_cast<int64_t>(absl::GetFlag(FLAGS_minutes) * 60e3 / (o.slowdown_ms + 5) * 0.65);
  o.dir = absl::GetFlag(FLAGS_dir).empty() ? pstrain::testing::NewTempDir("pstrain-chaos")
                                           : absl::GetFlag(FLAGS_dir);
  std::fprintf(stderr, "chaos: seed %u, %lld clocks, logs in %s\n", o.seed,
               static_cast<long long>(o.clocks), o.dir.c_str());
  absl::StatusOr<pstrain::testing::ChaosReport> r = pstrain::testing::RunChaos(o);
  if (!r.ok()) {
    std::fprintf(stderr, "chaos: %s\n", std::string(r.status().message()).c_str());
    return 1;
  }
  std::printf("%s\n", r->json.c_str());
  return r->exit_code == 0 && r->bit_identical ? 0 : 1;
}
