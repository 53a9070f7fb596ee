// psctl status against a running cluster on OS-chosen loopback ports.
#include <set>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "common/refused.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "proto/member.pb.h"
#include "proto/status.pb.h"
#include "tests/cluster.h"
#include "tests/test_jobs.h"

namespace pstrain {
namespace testing {
namespace {

absl::StatusOr<ClusterStatus> StatusJson(const std::string& scheduler, std::string* raw) {
  absl::StatusOr<int> code =
      RunCommand({BinaryPath("tools/psctl"), "status", "--scheduler=" + scheduler, "--json"}, raw,
                 absl::Seconds(20), "psctl");
  if (!code.ok()) return code.status();
  if (*code != 0) return absl::InternalError("psctl exited " + std::to_string(*code) + ": " + *raw);
  ClusterStatus st;
  if (!google::protobuf::util::JsonStringToMessage(*raw, &st).ok()) {
    return absl::InternalError("psctl printed no ClusterStatus JSON: " + *raw);
  }
  return st;
}

// Polls psctl status --json until both workers report a clock > 0 and,
// through a heartbeat (every 500 ms), their first loss and pushed bytes (a
// push is counted once the servers acknowledged it, which may be a clock
// after the loss), and every member says RUNNING -- its last heartbeat's
// state: a server says so once its store is made, which a slow machine
// shows a heartbeat late. `raw` is the last JSON.
void AwaitRunning(Cluster& cluster, ClusterStatus* st, std::string* raw) {
  const absl::Time until = absl::Now() + absl::Seconds(30);
  bool running = false;
  while (absl::Now() < until && !running) {
    absl::StatusOr<ClusterStatus> s = StatusJson(cluster.scheduler_address(), raw);
    ASSERT_TRUE(s.ok()) << s.status() << cluster.Logs();
    *st = *s;
    int ticking = 0, members_running = 0;
    for (const MemberStatus& m : st->members()) {
      ticking += m.role() == WORKER && m.clock() > 0 && m.worker().loss() > 0 && m.bytes_out() > 0;
      members_running += m.state() == RUNNING;
    }
    running = st->job_state() == RUNNING_JOB && ticking == 2 && members_running == 4;
    if (!running) absl::SleepFor(absl::Milliseconds(200));
  }
  ASSERT_TRUE(running) << *raw << cluster.Logs();
}

// psctl status --target of server 1 alone: its Status, with the one
// refusal counter carrying every word and a healthy run refused nothing.
void ExpectTheServerAnswers(const ClusterStatus& st) {
  std::string server_address;
  for (const MemberStatus& m : st.members()) {
    if (m.role() == SERVER && m.id() == 1) server_address = m.address();
  }
  std::string one;
  ASSERT_EQ(RunCommand({BinaryPath("tools/psctl"), "status", "--target=" + server_address,
                        "--role=server", "--json"},
                       &one, absl::Seconds(20), "psctl-server")
                .value_or(-1),
            0)
      << one;
  MemberStatus server;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(one, &server).ok()) << one;
  EXPECT_EQ(server.role(), SERVER);
  EXPECT_EQ(server.id(), 1);
  EXPECT_GT(server.pushes(), 0);
  for (const char* what : kRefusedWhat) EXPECT_EQ(server.server().refused().count(what), 1u) << one;
  EXPECT_EQ(Refused(server, kRefusedChunks), 0) << one;
  EXPECT_EQ(Refused(server, kRefusedRows), 0) << one;
}

// Each worker's final Status holds the whole run: its clocks after the
// first (which waits for the cluster), their seconds and their split.
void ExpectTheWholeRunSplit(const ClusterStatus& final_status) {
  for (int w = 0; w < 2; ++w) {
    const MemberStatus n = MemberOf(final_status, WORKER, w);
    EXPECT_EQ(n.worker().clocks_trained(), 199);
    // --straggler=fixed:20 sleeps 20 ms in every clock.
    EXPECT_GE(n.worker().run_split().compute_ms(), 20);
    EXPECT_GE(n.worker().train_s(), 199 * 0.020);
    // A clock's calls: the gate, and a push and a pull to each server.
    EXPECT_NEAR(n.worker().run_split().rpcs(), 5, 0.1);
    EXPECT_GT(n.worker().run_split().bytes(), 0);
  }
}

TEST(PsctlStatusTest, ListsEveryMemberOfARunningCluster) {
  Cluster cluster("psctl");
  ClusterOptions options;
  // Slow enough to be seen running: 200 clocks at >= 20 ms each.
  options.job_text = SmallJob("batch_size: 32\nclocks: 200\n");
  options.servers = 2;
  options.workers = 2;
  // The whole gradient in one push to each server (with overlap, each
  // layer's goes alone: more calls, by the layers the servers hold).
  options.worker_flags = {{"--straggler=fixed:20", "--overlap=off"},
                          {"--straggler=fixed:20", "--overlap=off"}};
  ASSERT_TRUE(cluster.Start(options).ok());

  ClusterStatus st;
  std::string raw;
  ASSERT_NO_FATAL_FAILURE(AwaitRunning(cluster, &st, &raw));
  EXPECT_EQ(st.scheduler().role(), SCHEDULER);
  EXPECT_EQ(st.scheduler().address(), cluster.scheduler_address());
  EXPECT_EQ(st.total_clocks(), 200);
  EXPECT_EQ(st.consistency(), BSP);
  ASSERT_EQ(st.members_size(), 4) << raw;
  std::set<std::pair<int, int>> seen;
  std::set<std::string> addresses;
  for (const MemberStatus& m : st.members()) {
    seen.insert({m.role(), m.id()});
    addresses.insert(m.address());
    EXPECT_TRUE(absl::StartsWith(m.address(), "127.0.0.1:")) << m.address();
    EXPECT_EQ(m.state(), RUNNING) << raw;
    if (m.role() == WORKER) {
      EXPECT_GT(m.bytes_out(), 0);
      EXPECT_GT(m.worker().loss(), 0);
    }
  }
  EXPECT_EQ(seen,
            (std::set<std::pair<int, int>>{{SERVER, 0}, {SERVER, 1}, {WORKER, 0}, {WORKER, 1}}));
  EXPECT_EQ(addresses.size(), 4u);

  // The table form names every member too, and a server answers directly.
  std::string table;
  ASSERT_EQ(RunCommand(
                {BinaryPath("tools/psctl"), "status", "--scheduler=" + cluster.scheduler_address()},
                &table, absl::Seconds(20), "psctl-table")
                .value_or(-1),
            0)
      << table;
  for (const char* role : {"scheduler", "worker", "server"}) {
    EXPECT_TRUE(absl::StrContains(table, role)) << table;
  }
  ASSERT_NO_FATAL_FAILURE(ExpectTheServerAnswers(st));

  // The job runs to its end and everyone exits cleanly.
  absl::StatusOr<int> code = cluster.WaitAll(absl::Seconds(120));
  ASSERT_TRUE(code.ok()) << code.status() << cluster.Logs();
  EXPECT_EQ(*code, 0) << cluster.Logs();
  const absl::StatusOr<ClusterStatus> final_status = cluster.FinalStatus();
  ASSERT_TRUE(final_status.ok()) << final_status.status();
  ExpectTheWholeRunSplit(*final_status);

  // Nobody listens any more: a clear error and a non-zero exit.
  std::string gone;
  EXPECT_EQ(RunCommand({BinaryPath("tools/psctl"), "status",
                        "--scheduler=" + cluster.scheduler_address(), "--timeout_s=2"},
                       &gone, absl::Seconds(20), "psctl-gone")
                .value_or(-1),
            1)
      << gone;
  EXPECT_TRUE(absl::StrContains(gone, cluster.scheduler_address())) << gone;
}

}  // namespace
}  // namespace testing
}  // namespace pstrain
