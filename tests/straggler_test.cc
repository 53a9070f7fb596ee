// ps_worker --straggler through real daemons: the delay lands where it is
// asked for (one named worker), and under BSP the other worker waits for
// it, at the gate or in the pull the servers hold until its round closes. Lower bounds only: a
// sleep of 40 ms a clock makes a clock's compute at least 40 ms however loaded the machine.
#include "gtest/gtest.h"
#include "proto/member.pb.h"
#include "proto/status.pb.h"
#include "tests/cluster.h"
#include "tests/test_jobs.h"
#include "tests/wait.h"

namespace pstrain {
namespace testing {
namespace {

TEST(StragglerTest, OnlyTheNamedWorkerIsSlowAndBspWaitsForIt) {
  Cluster cluster("straggler");
  ClusterOptions options;
  options.job_text = SmallJob("batch_size: 32\nclocks: 100000\nconsistency: BSP\n");
  options.servers = 1;
  options.workers = 2;
  const std::vector<std::string> flags = {"--straggler=fixed:40", "--straggler_workers=1"};
  options.worker_flags = {flags, flags};
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.Logs();
  ClusterStatus seen;
  ASSERT_TRUE(WaitForStatus(
      cluster.scheduler_address(),
      [&](const ClusterStatus& st) {
        seen = st;
        int ready = 0;
        for (const MemberStatus& m : st.members()) {
          ready += m.role() == WORKER && m.worker().clocks_trained() >= 20;
        }
        return ready == 2;
      },
      absl::Seconds(60)))
      << cluster.Logs();
  const MemberStatus& fast = MemberOf(seen, WORKER, 0);
  const MemberStatus& slow = MemberOf(seen, WORKER, 1);
  EXPECT_GE(slow.worker().run_split().compute_ms(), 40) << "worker 1 sleeps 40 ms a clock";
  EXPECT_LT(fast.worker().run_split().compute_ms(), slow.worker().run_split().compute_ms() - 20)
      << "worker 0 is not delayed";
  // (With overlap, on by default, the servers hold its pull instead.)
  EXPECT_GT(fast.worker().run_split().gate_ms() + fast.worker().run_split().pull_ms(),
            fast.worker().run_split().compute_ms())
      << "under BSP worker 0 waits for worker 1 at the gate or in its pull";
}

// Bad values: the worker exits 2 with the reason, before it registers.
TEST(StragglerTest, BadValuesEndTheWorkerWithExitCode2) {
  for (const char* bad :
       {"--straggler=fixed:-5", "--straggler=gamma:2", "--straggler=pareto:5:0"}) {
    std::string out;
    absl::StatusOr<int> code =
        RunCommand({BinaryPath("worker/ps_worker"), "--scheduler=127.0.0.1:1", bad}, &out,
                   absl::Seconds(20), "ps_worker");
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 2) << bad << ": " << out;
  }
}

}  // namespace
}  // namespace testing
}  // namespace pstrain
