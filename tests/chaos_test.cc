// The chaos run in CI (tests/chaos.h): a supervised BSP job with
// checkpoints, faults of every kind (SIGKILL, SIGSTOP/SIGCONT of workers,
// servers and the scheduler) at random times; the job ends DONE with
// weights bit-identical to an undisturbed run. PSTRAIN_CHAOS_SEED picks the
// faults (default: a fresh seed, printed).
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>

#include "absl/strings/numbers.h"
#include "gtest/gtest.h"
#include "tests/chaos.h"
#include "tests/cluster.h"

namespace pstrain {
namespace testing {
namespace {

TEST(ChaosTest, FaultsOfEveryKindAndTheWeightsEndBitIdentical) {
  ChaosOptions o;
  o.seed = std::random_device{}();
  if (const char* env = std::getenv("PSTRAIN_CHAOS_SEED")) (void)absl::SimpleAtoi(env, &o.seed);
  o.clocks = 3000;
  o.dir = NewTempDir("chaos");
  std::printf("chaos seed %u\n", o.seed);
  absl::StatusOr<ChaosReport> r = RunChaos(o);
  ASSERT_TRUE(r.ok()) << r.status();
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
}

}  // namespace
}  // namespace testing
}  // namespace pstrain
