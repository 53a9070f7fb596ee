// A server added to a running job (ps_server --join), against real
// daemons: under BSP the job grows from 2 to 3 servers mid-run and ends
// with the weights of the same job undisturbed, bit for bit, without a
// rollback -- the move's switch is the one new generation, at the clock of
// the checkpoint asked for it; the joined server holds its share of the
// chunks by the scheduler's placement. The joined server killed before the
// switch abandons the move and the job ends as undisturbed, with no
// rollback; an owner killed then rolls the job back as without a move, the
// joined server leaves, and the weights end the same. A job drained from
// 3 servers to 2 (psctl drain-server) ends with the weights of the job
// undisturbed, the drained server FINISHED at the switch. A join the job
// cannot take, or a drain, is refused (exit 2) and the job goes on. A
// worker killed mid-move (shrink) leaves the job and the move switches; a
// scheduler killed mid-move is taken over and the move switches, bit for
// bit as undisturbed.
#include <csignal>
#include <map>
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

ClusterOptions Servers(int servers, const std::string& checkpoints) {
  ClusterOptions options;
  options.job_text = SixteenClassJob("clocks: 200\nseed: 7\nchunk_bytes: 256");
  options.servers = servers;
  options.workers = 2;
  options.scheduler_flags = {"--heartbeat_timeout_ms=3000", "--end_grace_ms=3000"};
  if (!checkpoints.empty()) {
    options.scheduler_flags.push_back("--checkpoint_every=1000");
    options.scheduler_flags.push_back("--checkpoint_dir=" + checkpoints);
  }
  options.worker_flags = {{"--straggler=fixed:10"}, {"--straggler=fixed:10"}};
  return options;
}

ClusterOptions TwoServers(const std::string& checkpoints) { return Servers(2, checkpoints); }

// Worker 0's final weights and test accuracy of the job run undisturbed
// on `servers` servers (run once for every test).
struct Reference {
  TensorSet weights;
  double accuracy = 0;
};
const Reference& Undisturbed(int servers = 2) {
  static std::map<int, Reference>* const runs = new std::map<int, Reference>();
  if (runs->count(servers) == 0) {
    Cluster cluster(absl::StrCat("undisturbed-", servers));
    EXPECT_TRUE(cluster.Start(Servers(servers, cluster.dir() + "/checkpoints")).ok())
        << cluster.Logs();
    EXPECT_EQ(cluster.WaitAll(absl::Seconds(180)).value_or(-1), 0) << cluster.Logs();
    Reference& r = (*runs)[servers];
    r.weights = ReadWeights(cluster.worker_weights(0));
    absl::StatusOr<ClusterStatus> end = cluster.FinalStatus();
    EXPECT_TRUE(end.ok()) << end.status();
    if (end.ok()) r.accuracy = MemberOf(*end, WORKER, 0).worker().test_accuracy();
  }
  return runs->at(servers);
}

bool UnderWay(const std::string& scheduler) {
  return WaitForStatus(
      scheduler, [](const ClusterStatus& st) { return WorkerClock(st, 0) >= 40; },
      absl::Seconds(60), absl::Milliseconds(50));
}

TEST(PlacementMoveTest, AServerJoinsMidRunAndTheWeightsEndBitIdentical) {
  const TensorSet& undisturbed = Undisturbed().weights;
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
// (their Status), none by server `out` (out of the job; -1: none).
void ExpectEveryParamServedOnce(const ClusterStatus& end, const TensorSet& model, int out = 2) {
  int64_t served = 0;
  for (const PlacedServer& s : end.placement().servers()) {
    served += MemberOf(end, SERVER, s.server()).server().params();
  }
  int64_t numel = 0;
  for (const NamedTensor& t : model.tensors()) numel += t.values_size();
  EXPECT_EQ(served, numel);
  if (out >= 0) {
    EXPECT_EQ(MemberOf(end, SERVER, out).server().params(), 0);
  }
}

TEST(PlacementMoveTest, AJoinedServerKilledBeforeTheSwitchLeavesTheJobAsItWas) {
  const TensorSet& undisturbed = Undisturbed().weights;
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
  const TensorSet& undisturbed = Undisturbed().weights;
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

TEST(PlacementMoveTest, AWorkerKilledMidMoveLeavesTheJobAndTheMoveSwitches) {
  const Reference& undisturbed = Undisturbed();
  Cluster cluster("worker-killed");
  ASSERT_TRUE(cluster.Start(TwoServers(cluster.dir() + "/checkpoints")).ok()) << cluster.Logs();
  ASSERT_TRUE(UnderWay(cluster.scheduler_address())) << cluster.Logs();
  ASSERT_TRUE(JoinWhileHeld(cluster)) << cluster.Logs();
  // Worker 1, stopped before the switch clock, killed: under shrink the
  // job goes on without it once it is declared dead, and the move with it.
  cluster.workers()[1].Kill(SIGCONT);
  cluster.workers()[1].Kill(SIGKILL);
  ASSERT_EQ(cluster.WaitAll(absl::Seconds(180)).value_or(-1), 0) << cluster.Logs();

  absl::StatusOr<ClusterStatus> end = cluster.FinalStatus();
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->job_state(), DONE);
  // The killed process's id (the processes register in any order).
  const int dead = MemberOf(*end, WORKER, 0).state() == DEAD ? 0 : 1;
  EXPECT_EQ(MemberOf(*end, WORKER, dead).state(), DEAD);
  EXPECT_EQ(MemberOf(*end, WORKER, 1 - dead).state(), FINISHED);
  EXPECT_EQ(end->placement().version(), 2) << cluster.Logs();
  ASSERT_EQ(end->placement().history_size(), 1);
  EXPECT_EQ(end->placement().history(0).abandoned(), "");
  ASSERT_EQ(end->rollbacks_size(), 1);  // the switch
  EXPECT_EQ(end->rollbacks(0).placement_version(), 2);
  ExpectEveryParamServedOnce(*end, undisturbed.weights, /*out=*/-1);
  // One worker trained the rest alone: not the same weights, the same skill.
  const double accuracy = MemberOf(*end, WORKER, 1 - dead).worker().test_accuracy();
  EXPECT_NEAR(accuracy, undisturbed.accuracy, 0.05) << "undisturbed " << undisturbed.accuracy;
}

TEST(PlacementMoveTest, ASchedulerKilledMidMoveIsTakenOverAndTheMoveSwitches) {
  const Reference& undisturbed = Undisturbed();
  Cluster cluster("scheduler-killed");
  ClusterOptions options = TwoServers(cluster.dir() + "/checkpoints");
  options.scheduler_flags.push_back("--state_dir=" + cluster.dir() + "/state");
  options.server_flags = {"--scheduler_timeout_ms=20000"};
  for (std::vector<std::string>& flags : options.worker_flags) {
    flags.push_back("--scheduler_timeout_ms=20000");
  }
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.Logs();
  ASSERT_TRUE(UnderWay(cluster.scheduler_address())) << cluster.Logs();
  ASSERT_TRUE(JoinWhileHeld(cluster)) << cluster.Logs();
  // The move is in the durable state: a scheduler started again on it
  // holds the switch clock and switches as the first would have.
  cluster.scheduler().Kill(SIGKILL);
  (void)cluster.scheduler().Wait(absl::Seconds(10));
  cluster.workers()[1].Kill(SIGCONT);
  ASSERT_TRUE(cluster.RestartScheduler().ok()) << cluster.Logs();
  ASSERT_EQ(cluster.WaitAll(absl::Seconds(180)).value_or(-1), 0) << cluster.Logs();

  absl::StatusOr<ClusterStatus> end = cluster.FinalStatus();
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->job_state(), DONE);
  EXPECT_EQ(end->placement().version(), 2) << cluster.Logs();
  ASSERT_EQ(end->placement().history_size(), 1);
  EXPECT_EQ(end->placement().history(0).abandoned(), "");
  ASSERT_EQ(end->rollbacks_size(), 1);
  EXPECT_EQ(end->rollbacks(0).placement_version(), 2);
  ExpectEveryParamServedOnce(*end, undisturbed.weights, /*out=*/-1);
  EXPECT_EQ(MaxDifference(ReadWeights(cluster.worker_weights(0)), undisturbed.weights), 0.0);
  EXPECT_EQ(MaxDifference(ReadWeights(cluster.worker_weights(1)), undisturbed.weights), 0.0);
}

int Psctl(const std::vector<std::string>& args, std::string* output) {
  std::vector<std::string> argv = {BinaryPath("tools/psctl")};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, output, absl::Seconds(60), "psctl").value_or(-1);
}

TEST(PlacementMoveTest, AServerDrainedMidRunLeavesAndTheWeightsEndBitIdentical) {
  const TensorSet& undisturbed = Undisturbed(3).weights;
  ASSERT_GT(undisturbed.tensors_size(), 0);
  EXPECT_EQ(MaxDifference(undisturbed, Undisturbed(2).weights),
            0.0);  // placement-free, as it should be
  Cluster cluster("drain");
  // No checkpoints: a move hands the state over, server to server.
  ASSERT_TRUE(cluster.Start(Servers(3, "")).ok()) << cluster.Logs();
  ASSERT_TRUE(UnderWay(cluster.scheduler_address())) << cluster.Logs();
  const std::string scheduler = "--scheduler=" + cluster.scheduler_address();
  std::string out;
  // Refusals, each naming its reason: exit 2, nothing changed.
  EXPECT_EQ(Psctl({"drain-server", "7", scheduler}, &out), 2) << out;
  EXPECT_NE(out.find("server 7 is not in the job"), std::string::npos) << out;
  EXPECT_EQ(Psctl({"drain-server", "one", scheduler}, &out), 2) << out;
  EXPECT_EQ(Psctl({"drain-server", scheduler}, &out), 2) << out;
  ASSERT_EQ(Psctl({"drain-server", "1", scheduler, "--wait", "--json"}, &out), 0)
      << out << cluster.Logs();
  // psctl status shows the placement and the move that ended.
  EXPECT_EQ(Psctl({"status", scheduler}, &out), 0) << out;
  EXPECT_NE(out.find("placement 2: server 0"), std::string::npos) << out;
  ASSERT_EQ(cluster.WaitAll(absl::Seconds(180)).value_or(-1), 0) << cluster.Logs();

  absl::StatusOr<ClusterStatus> end = cluster.FinalStatus();
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->job_state(), DONE);
  const PlacementStatus& placement = end->placement();
  EXPECT_EQ(placement.version(), 2);
  ASSERT_EQ(placement.servers_size(), 2);
  EXPECT_EQ(placement.servers(0).server(), 0);
  EXPECT_EQ(placement.servers(1).server(), 2);
  ASSERT_EQ(placement.history_size(), 1);
  EXPECT_EQ(placement.history(0).kind(), DRAIN_SERVER);
  EXPECT_EQ(placement.history(0).server(), 1);
  EXPECT_EQ(placement.history(0).abandoned(), "");
  // The switch is the one new generation; nothing rolled back.
  ASSERT_EQ(end->rollbacks_size(), 1);
  EXPECT_EQ(end->rollbacks(0).placement_version(), 2);
  // The drained server left FINISHED at the switch, before the job's end;
  // the two others serve every parameter.
  const MemberStatus drained = MemberOf(*end, SERVER, 1);
  EXPECT_EQ(drained.state(), FINISHED);
  EXPECT_NE(drained.message().find("drained at clock"), std::string::npos) << drained.message();
  EXPECT_EQ(drained.server().placement_version(), 1);
  ExpectEveryParamServedOnce(*end, undisturbed, /*out=*/-1);
  EXPECT_EQ(MaxDifference(ReadWeights(cluster.worker_weights(0)), undisturbed), 0.0);
  EXPECT_EQ(MaxDifference(ReadWeights(cluster.worker_weights(1)), undisturbed), 0.0);
}

TEST(PlacementMoveTest, AJoinTheJobCannotTakeIsRefusedAndTheJobGoesOn) {
  Cluster cluster("refused");
  ClusterOptions options = TwoServers("");
  options.job_text += "\nstandby_copies: 1";  // (their layout does not follow a placement yet)
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.Logs();
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
