// A server added to a running job (ps_server --join), against real
// daemons: under BSP the job grows from 2 to 3 servers mid-run and ends
// with the weights of the same job undisturbed, bit for bit, without a
// rollback -- the move's switch is the one new generation, at the clock of
// the checkpoint asked for it; the joined server holds its share of the
// chunks by the scheduler's placement. The joined server killed before the
// switch abandons the move and the job ends as undisturbed, with no
// rollback; an owner killed then rolls the job back as without a move, the
// joined server leaves, and the weights end the same. A join the job
// cannot take is refused (exit 2) and the job goes on.
#include <csignal>
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

// Worker 0's final weights of the job run undisturbed on two servers (run
// once for every test).
const TensorSet& Undisturbed() {
  static const TensorSet* const weights = [] {
    Cluster cluster("undisturbed");
    EXPECT_TRUE(cluster.Start(TwoServers(cluster.dir() + "/checkpoints")).ok()) << cluster.Logs();
    EXPECT_EQ(cluster.WaitAll(absl::Seconds(180)).value_or(-1), 0) << cluster.Logs();
    return new TensorSet(ReadWeights(cluster.worker_weights(0)));
  }();
  return *weights;
}

bool UnderWay(const std::string& scheduler) {
  return WaitForStatus(
      scheduler, [](const ClusterStatus& st) { return WorkerClock(st, 0) >= 40; },
      absl::Seconds(60), absl::Milliseconds(50));
}

TEST(PlacementMoveTest, AServerJoinsMidRunAndTheWeightsEndBitIdentical) {
  const TensorSet& undisturbed = Undisturbed();
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

// Stops worker 1 (SIGSTOP) and adds a server: the switch cannot come
// while the worker is stopped (no checkpoint of the switch clock), so what
// the test does next happens before it. True once the move is under way.
bool JoinWhileHeld(Cluster& cluster) {
  cluster.workers()[1].Kill(SIGSTOP);
  if (!cluster.AddServer({"--join"}).ok()) return false;
  return WaitForStatus(
      cluster.scheduler_address(),
      [](const ClusterStatus& st) { return st.placement().has_move(); }, absl::Seconds(20),
      absl::Milliseconds(20));
}

// Every parameter served by exactly one server of the final placement
// (their Status), none by server 2, out of the job.
void ExpectEveryParamServedOnce(const ClusterStatus& end, const TensorSet& model) {
  int64_t served = 0;
  for (const PlacedServer& s : end.placement().servers()) {
    served += MemberOf(end, SERVER, s.server()).server().params();
  }
  int64_t numel = 0;
  for (const NamedTensor& t : model.tensors()) numel += t.values_size();
  EXPECT_EQ(served, numel);
  EXPECT_EQ(MemberOf(end, SERVER, 2).server().params(), 0);
}

TEST(PlacementMoveTest, AJoinedServerKilledBeforeTheSwitchLeavesTheJobAsItWas) {
  const TensorSet& undisturbed = Undisturbed();
  ASSERT_GT(undisturbed.tensors_size(), 0);
  Cluster cluster("joiner-killed");
  ASSERT_TRUE(cluster.Start(TwoServers(cluster.dir() + "/checkpoints")).ok()) << cluster.Logs();
  ASSERT_TRUE(UnderWay(cluster.scheduler_address())) << cluster.Logs();
  ASSERT_TRUE(JoinWhileHeld(cluster)) << cluster.Logs();
  cluster.servers().back().Kill(SIGKILL);
  cluster.workers()[1].Kill(SIGCONT);
  ASSERT_EQ(cluster.WaitAll(absl::Seconds(180)).value_or(-1), 0) << cluster.Logs();

  absl::StatusOr<ClusterStatus> end = cluster.FinalStatus();
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->job_state(), DONE);
  // The move abandoned: the placement, the servers and the weights are the
  // undisturbed run's, and nothing rolled back.
  EXPECT_EQ(end->placement().version(), 1);
  ASSERT_EQ(end->placement().history_size(), 1);
  EXPECT_EQ(end->placement().history(0).abandoned(), "server 2 was lost") << cluster.Logs();
  EXPECT_EQ(end->rollbacks_size(), 0);
  EXPECT_EQ(MemberOf(*end, SERVER, 2).state(), DEAD);
  ExpectEveryParamServedOnce(*end, undisturbed);
  EXPECT_EQ(MaxDifference(ReadWeights(cluster.worker_weights(0)), undisturbed), 0.0);
  EXPECT_EQ(MaxDifference(ReadWeights(cluster.worker_weights(1)), undisturbed), 0.0);
}

TEST(PlacementMoveTest, AnOwnerKilledMidMoveRollsBackAndTheJoinedServerLeaves) {
  const TensorSet& undisturbed = Undisturbed();
  ASSERT_GT(undisturbed.tensors_size(), 0);
  Cluster cluster("owner-killed");
  ASSERT_TRUE(cluster.Start(TwoServers(cluster.dir() + "/checkpoints")).ok()) << cluster.Logs();
  ASSERT_TRUE(UnderWay(cluster.scheduler_address())) << cluster.Logs();
  ASSERT_TRUE(JoinWhileHeld(cluster)) << cluster.Logs();
  cluster.servers()[0].Kill(SIGKILL);
  cluster.workers()[1].Kill(SIGCONT);
  // The move abandoned by the rollback, the joined server is told to leave.
  Process& joined = cluster.servers()[2];
  EXPECT_EQ(joined.Wait(absl::Seconds(60)).value_or(-1), 1) << cluster.Logs();
  int dead = -1;  // the id the killed process registered with
  ASSERT_TRUE(WaitForStatus(
      cluster.scheduler_address(),
      [&](const ClusterStatus& st) {
        for (int s = 0; s < 2; ++s) {
          if (MemberOf(st, SERVER, s).state() == DEAD) dead = s;
        }
        return dead >= 0;
      },
      absl::Seconds(20), absl::Milliseconds(50)))
      << cluster.Logs();
  ASSERT_TRUE(cluster.AddServer({absl::StrCat("--id=", dead)}).ok());
  ASSERT_EQ(cluster.WaitAll(absl::Seconds(180)).value_or(-1), 0) << cluster.Logs();

  absl::StatusOr<ClusterStatus> end = cluster.FinalStatus();
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->job_state(), DONE);
  EXPECT_EQ(end->placement().version(), 1);
  ASSERT_EQ(end->placement().history_size(), 1);
  EXPECT_NE(end->placement().history(0).abandoned(), "");
  ASSERT_EQ(end->rollbacks_size(), 1);
  EXPECT_EQ(end->rollbacks(0).placement_version(), 0);  // the owner's loss, not a switch
  EXPECT_EQ(MemberOf(*end, SERVER, 2).state(), FAILED);
  ExpectEveryParamServedOnce(*end, undisturbed);
  EXPECT_EQ(MaxDifference(ReadWeights(cluster.worker_weights(0)), undisturbed), 0.0);
  EXPECT_EQ(MaxDifference(ReadWeights(cluster.worker_weights(1)), undisturbed), 0.0);
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
