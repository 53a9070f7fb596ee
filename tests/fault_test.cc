// Faults: a member killed with SIGKILL is declared dead once the scheduler's
// heartbeat timeout passes; Status says when and why, and the job ends with
// a message instead of waiting forever.
#include <string>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "common/rpc.h"
#include "gtest/gtest.h"
#include "proto/cluster.grpc.pb.h"
#include "tests/cluster.h"
#include "tests/test_jobs.h"

namespace pstrain {
namespace testing {
namespace {

absl::StatusOr<ClusterStatus> SchedulerStatus(const std::string& address) {
  auto stub = Scheduler::NewStub(MakeChannel(address));
  auto ctx = ContextWithTimeout(absl::Seconds(2));
  ClusterStatus st;
  const grpc::Status rpc = stub->Status(ctx.get(), StatusRequest(), &st);
  if (!rpc.ok()) return FromGrpc(rpc);
  return st;
}

TEST(FaultTest, AKilledWorkerIsDeclaredDeadAndNobodyHangs) {
  Cluster cluster("kill");
  ClusterOptions options;
  options.job_text = SmallJob("batch_size: 16\nsteps: 2000\n");
  options.servers = 1;
  options.workers = 2;
  // --linger_ms: the scheduler answers Status for a while after the abort.
  options.scheduler_flags = {"--heartbeat_timeout_ms=1500", "--end_grace_ms=3000",
                             "--linger_ms=5000"};
  options.worker_flags = {{"--debug_slowdown_ms=20"}, {"--debug_slowdown_ms=20"}};
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.Logs();
  // Let training begin.
  bool training = false;
  for (int i = 0; i < 300 && !training; ++i) {
    absl::StatusOr<ClusterStatus> st = SchedulerStatus(cluster.scheduler_address());
    if (st.ok()) {
      for (const NodeStatus& m : st->members()) training |= m.role() == WORKER && m.clock() >= 5;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_TRUE(training) << cluster.Logs();
  const absl::Time killed = absl::Now();
  cluster.workers()[1].Kill(SIGKILL);
  // Until it is declared dead, the other worker waits at the gate, and the
  // scheduler's Status says so.
  bool gate_wait_seen = false;
  for (int i = 0; i < 40 && !gate_wait_seen; ++i) {
    absl::StatusOr<ClusterStatus> st = SchedulerStatus(cluster.scheduler_address());
    if (st.ok()) {
      for (const Wait& w : st->scheduler().waits()) {
        gate_wait_seen |= absl::StrContains(w.what(), "at the gate of clock") &&
                          w.since_unix_ms() > 0;
      }
    }
    absl::SleepFor(absl::Milliseconds(25));
  }
  EXPECT_TRUE(gate_wait_seen);

  // Declared dead after the timeout, with when and why.
  NodeStatus dead;
  for (int i = 0; i < 200 && dead.state() != DEAD; ++i) {
    absl::StatusOr<ClusterStatus> st = SchedulerStatus(cluster.scheduler_address());
    if (st.ok()) {
      for (const NodeStatus& m : st->members()) {
        if (m.state() == DEAD) dead = m;
      }
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  const absl::Duration after = absl::Now() - killed;
  ASSERT_EQ(dead.state(), DEAD) << cluster.Logs();
  EXPECT_EQ(dead.role(), WORKER);
  EXPECT_TRUE(absl::StrContains(dead.message(), "no heartbeat for")) << dead.message();
  EXPECT_GT(dead.declared_dead_unix_ms(), absl::ToUnixMillis(killed));
  EXPECT_LT(after, absl::Milliseconds(1500) + absl::Seconds(2));
  std::printf("worker declared dead %.2f s after SIGKILL: %s\n", absl::ToDoubleSeconds(after),
              dead.message().c_str());

  // Everyone else stops with the reason, no hang.
  absl::StatusOr<int> code = cluster.WaitAll(absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << code.status() << cluster.Logs();
  EXPECT_EQ(*code, 1) << cluster.Logs();
  EXPECT_TRUE(absl::StrContains(cluster.scheduler().Log(), "declared dead: no heartbeat for"))
      << cluster.scheduler().Log();
  EXPECT_EQ(cluster.workers()[0].Wait(absl::ZeroDuration()).value_or(-1), 1) << cluster.Logs();
  EXPECT_EQ(cluster.servers()[0].Wait(absl::ZeroDuration()).value_or(-1), 1) << cluster.Logs();
}

}  // namespace
}  // namespace testing
}  // namespace pstrain
