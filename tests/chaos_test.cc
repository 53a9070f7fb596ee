// The chaos run in CI (tests/chaos.h): a supervised BSP job with
// checkpoints, faults of every kind (SIGKILL, SIGSTOP/SIGCONT of workers,
// servers and the scheduler) at random times; the job ends DONE with
// weights bit-identical to an undisturbed run. PSTRAIN_CHAOS_SEED picks the
// faults (default: a fresh seed, printed).
#include "tests/chaos.h"

#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>

#include "absl/strings/numbers.h"
#include "gtest/gtest.h"
#include "tests/cluster.h"

namespace pstrain {
namespace testing {
namespace {

// Runs the chaos job of `clocks` clocks (standby copies or not); checks
// what holds either way and returns the report.
ChaosReport RunChecked(int64_t clocks, bool standby, const std::string& name) {
  ChaosOptions o;
  o.seed = std::random_device{}();
  if (const char* env = std::getenv("PSTRAIN_CHAOS_SEED")) (void)absl::SimpleAtoi(env, &o.seed);
  o.clocks = clocks;
  o.standby = standby;
  o.dir = NewTempDir(name);
  // A run that is not bit-identical is kept in the test's outputs
  // (bazel-testlogs/tests/chaos_test/test.outputs).
  if (const char* outputs = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR")) o.keep_dir = outputs;
  std::printf("chaos seed %u\n", o.seed);
  absl::StatusOr<ChaosReport> r = RunChaos(o);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  std::printf("%s\n", r->json.c_str());
  EXPECT_EQ(r->exit_code, 0) << ReadFile(o.dir + "/disturbed/local_cluster.log");
  EXPECT_TRUE(r->bit_identical);
  EXPECT_GE(r->faults.size(), 6u);
  std::set<std::string> kinds;
  for (const Fault& f : r->faults) {
    kinds.insert(f.kind + " " + f.target.substr(0, f.target.find_first_of("0123456789")));
    EXPECT_GE(f.recovery_s, 0) << f.kind << " " << f.target << " at clock " << f.clock;
  }
  EXPECT_GE(kinds.size(), 3u);
  return *r;
}

TEST(ChaosTest, FaultsOfEveryKindAndTheWeightsEndBitIdentical) {
  RunChecked(3000, /*standby=*/false, "chaos");
}

// With standby copies a killed (or long frozen) server's standby is
// promoted: no server's fault rolls back, the weights as undisturbed. (A
// worker killed while its push had reached some chunks and not others
// has its replacement ask for a rollback: Rollback.redo, counted apart.)
TEST(ChaosTest, WithStandbyCopiesNoFaultRollsBack) {
  const ChaosReport r = RunChecked(2000, /*standby=*/true, "chaos_standby");
  EXPECT_EQ(r.rollbacks - r.redo_rollbacks, 0);
  bool server_killed = false;
  for (const Fault& f : r.faults)
    server_killed |= f.kind == "kill" && f.target.rfind("server", 0) == 0;
  if (server_killed) {
    EXPECT_GE(r.promotions, 1);
  }
}

}  // namespace
}  // namespace testing
}  // namespace pstrain
