// A server added to a running job (ps_server --join), against real
// daemons: under BSP the job grows from 2 to 3 servers mid-run and ends
// with the weights of the same job undisturbed, bit for bit, without a
// rollback -- the move's switch is the one new generation, at the clock of
// the checkpoint asked for it; the joined server holds its share of the
// chunks by the scheduler's placement. A join the job cannot take is
// refused (exit 2) and the job goes on.
#include <set>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/status.pb.h"
#include "tests/cluster.h"
#include "tests/test_jobs.h"
#include "tests/wait.h"

namespace pstrain {
namespace testing {
namespace {

ClusterOptions TwoServers(const std::string& checkpoints) {
  ClusterOptions options;
  options.job_text = SixteenClassJob("clocks: 200\nseed: 7\nchunk_bytes: 256");
  options.servers = 2;
  options.workers = 2;
  options.scheduler_flags = {"--heartbeat_timeout_ms=3000", "--end_grace_ms=3000"};
  if (!checkpoints.empty()) {
    options.scheduler_flags.push_back("--checkpoint_every=1000");
    options.scheduler_flags.push_back("--checkpoint_dir=" + checkpoints);
  }
  options.worker_flags = {{"--straggler=fixed:10"}, {"--straggler=fixed:10"}};
  return options;
}

// Worker 0's final weights of the job run undisturbed on two servers.
TensorSet Undisturbed() {
  Cluster cluster("undisturbed");
  EXPECT_TRUE(cluster.Start(TwoServers(cluster.dir() + "/checkpoints")).ok()) << cluster.Logs();
  EXPECT_EQ(cluster.WaitAll(absl::Seconds(180)).value_or(-1), 0) << cluster.Logs();
  return ReadWeights(cluster.worker_weights(0));
}

bool UnderWay(const std::string& scheduler) {
  return WaitForStatus(
      scheduler, [](const ClusterStatus& st) { return WorkerClock(st, 0) >= 40; },
      absl::Seconds(60), absl::Milliseconds(50));
}

TEST(PlacementMoveTest, AServerJoinsMidRunAndTheWeightsEndBitIdentical) {
  const TensorSet undisturbed = Undisturbed();
  ASSERT_GT(undisturbed.tensors_size(), 0);
  Cluster cluster("grow");
  ASSERT_TRUE(cluster.Start(TwoServers(cluster.dir() + "/checkpoints")).ok()) << cluster.Logs();
  ASSERT_TRUE(UnderWay(cluster.scheduler_address())) << cluster.Logs();
  ASSERT_TRUE(cluster.AddServer({"--join"}).ok());
  ASSERT_EQ(cluster.WaitAll(absl::Seconds(180)).value_or(-1), 0) << cluster.Logs();

  absl::StatusOr<ClusterStatus> end = cluster.FinalStatus();
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->job_state(), DONE);
  const PlacementStatus& placement = end->placement();
  EXPECT_EQ(placement.version(), 2) << cluster.Logs();
  ASSERT_EQ(placement.servers_size(), 3);
  int chunks = 0;
  for (const PlacedServer& s : placement.servers()) {
    EXPECT_GT(s.chunks(), 0) << "server " << s.server();
    chunks += s.chunks();
  }
  ASSERT_EQ(placement.history_size(), 1);
  EXPECT_EQ(placement.history(0).abandoned(), "");
  EXPECT_EQ(placement.history(0).kind(), ADD_SERVER);
  EXPECT_EQ(placement.history(0).server(), 2);
  // The one new generation is the switch; nothing rolled back.
  ASSERT_EQ(end->rollbacks_size(), 1);
  EXPECT_EQ(end->rollbacks(0).placement_version(), 2);
  EXPECT_EQ(end->rollbacks(0).from_clock(), placement.history(0).switch_clock());
  EXPECT_EQ(end->rollbacks(0).to_clock(), placement.history(0).switch_clock());
  // Each server served the chunks the placement gives it (its Status).
  const MemberStatus joined = MemberOf(*end, SERVER, 2);
  EXPECT_EQ(joined.state(), FINISHED);
  EXPECT_EQ(joined.server().placement_version(), 2);
  EXPECT_GT(joined.server().params(), 0);
  EXPECT_GT(joined.pushes(), 0);
  int64_t params = 0;
  for (int s = 0; s < 3; ++s) params += MemberOf(*end, SERVER, s).server().params();
  int64_t model = 0;
  for (const NamedTensor& t : undisturbed.tensors()) model += t.values_size();
  EXPECT_EQ(params, model);
  EXPECT_EQ(MaxDifference(ReadWeights(cluster.worker_weights(0)), undisturbed), 0.0);
  EXPECT_EQ(MaxDifference(ReadWeights(cluster.worker_weights(1)), undisturbed), 0.0);
  std::printf("grown 2 -> 3 servers at clock %lld: %d chunks, %lld bytes moved\n",
              static_cast<long long>(placement.history(0).switch_clock()), chunks,
              static_cast<long long>(placement.history(0).bytes()));
}

TEST(PlacementMoveTest, AJoinTheJobCannotTakeIsRefusedAndTheJobGoesOn) {
  Cluster cluster("refused");
  ASSERT_TRUE(cluster.Start(TwoServers("")).ok()) << cluster.Logs();  // no checkpoints
  ASSERT_TRUE(UnderWay(cluster.scheduler_address())) << cluster.Logs();
  ASSERT_TRUE(cluster.AddServer({"--join"}).ok());
  EXPECT_EQ(cluster.servers().back().Wait(absl::Seconds(30)).value_or(-1), 2);
  ASSERT_EQ(cluster.WaitAll(absl::Seconds(180)).value_or(-1), 0) << cluster.Logs();
  absl::StatusOr<ClusterStatus> end = cluster.FinalStatus();
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->job_state(), DONE);
  EXPECT_EQ(end->placement().version(), 1);
  EXPECT_EQ(end->placement().servers_size(), 2);
  EXPECT_EQ(end->placement().history_size(), 0);
  EXPECT_EQ(end->rollbacks_size(), 0);
}

}  // namespace
}  // namespace testing
}  // namespace pstrain
