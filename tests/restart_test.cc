// Server failure and whole-job restart from checkpoints: a server killed with
// SIGKILL and started again with its id, and a whole job killed and
// started again on the same checkpoint directory, both finish the job; the
// cluster rolls back to the newest complete checkpoint set consistently.
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "proto/tensor.pb.h"
#include "tests/cluster.h"
#include "tests/test_jobs.h"
#include "tests/wait.h"

namespace pstrain {
namespace testing {
namespace {

// Adam (so the optimizer state must come back too), BSP, chunks small
// enough for both servers to hold several.
const std::string& Job() {
  static const std::string* job =
      new std::string(SixteenClassJob("clocks: 300\nseed: 11\nchunk_bytes: 512"));
  return *job;
}

constexpr int kEvery = 10;

ClusterOptions Options(const std::string& checkpoint_dir, int workers) {
  ClusterOptions options;
  options.job_text = Job();
  options.servers = 2;
  options.workers = workers;
  options.scheduler_flags = {"--heartbeat_timeout_ms=1500", "--end_grace_ms=3000",
                             "--checkpoint_dir=" + checkpoint_dir,
                             absl::StrCat("--checkpoint_every=", kEvery)};
  for (int i = 0; i < workers; ++i) options.worker_flags.push_back({"--straggler=fixed:10"});
  return options;
}

// The cluster's first rollback once the servers have restored it (within
// 30 s; an empty one, done_unix_ms 0, if not).
Rollback FirstRollback(Cluster& cluster) {
  Rollback rollback;
  WaitForStatus(
      cluster.scheduler_address(),
      [&](const ClusterStatus& st) {
        if (st.rollbacks_size() > 0) rollback = st.rollbacks(0);
        return rollback.done_unix_ms() != 0;
      },
      absl::Seconds(30));
  return rollback;
}

// Waits until every worker of the cluster has finished `clock` clocks.
bool WaitForClock(Cluster& cluster, int64_t clock) {
  return WaitForStatus(
      cluster.scheduler_address(),
      [&](const ClusterStatus& st) { return SlowestClock(st) >= clock; }, absl::Seconds(120));
}

// Worker 0's final test accuracy as the scheduler's final Status reports it
// (-1 if it did not finish).
double FinalAccuracy(const Cluster& cluster) {
  absl::StatusOr<ClusterStatus> st = cluster.FinalStatus();
  if (!st.ok()) return -1;
  const MemberStatus w = MemberOf(*st, WORKER, 0);
  return w.state() == FINISHED ? w.worker().test_accuracy() : -1;
}

struct Undisturbed {
  TensorSet weights;
  double accuracy = -1;
};

// The undisturbed run of `workers` workers (run once per test binary).
const Undisturbed& Calm(int workers) {
  static std::map<int, Undisturbed>* runs = new std::map<int, Undisturbed>;
  auto it = runs->find(workers);
  if (it != runs->end()) return it->second;
  Undisturbed& out = (*runs)[workers];
  Cluster calm(absl::StrCat("calm", workers));
  if (calm.Start(Options(calm.dir() + "/ckpt", workers)).ok() &&
      calm.WaitAll(absl::Seconds(180)).value_or(1) == 0) {
    out.weights = ReadWeights(calm.worker_weights(0));
    out.accuracy = FinalAccuracy(calm);
  }
  return out;
}

// Kills server 1 after clock 95 and starts another server: with --id=1 at
// once, or without an id once the scheduler declared the first one dead.
void KillAndReplaceServer(bool with_rank, const std::vector<std::string>& worker_flags) {
  const Undisturbed& calm = Calm(2);
  ASSERT_GT(calm.accuracy, 0);
  Cluster cluster(with_rank ? "restart_rank" : "restart_dead");
  ClusterOptions options = Options(cluster.dir() + "/ckpt", 2);
  for (auto& flags : options.worker_flags) {
    flags.insert(flags.end(), worker_flags.begin(), worker_flags.end());
  }
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.Logs();
  ASSERT_TRUE(WaitForClock(cluster, 95)) << cluster.Logs();
  const int victim = cluster.ServerProcess(1);
  ASSERT_GE(victim, 0) << cluster.Logs();
  cluster.servers()[victim].Kill(SIGKILL);
  if (with_rank) {
    ASSERT_TRUE(cluster.AddServer({"--id=1"}).ok());
  } else {
    const bool dead = WaitForStatus(
        cluster.scheduler_address(),
        [](const ClusterStatus& st) {
          return std::any_of(st.members().begin(), st.members().end(), [](const MemberStatus& m) {
            return m.role() == SERVER && m.state() == DEAD;
          });
        },
        absl::Seconds(10));
    ASSERT_TRUE(dead) << cluster.Logs();
    ASSERT_TRUE(cluster.AddServer({}).ok());
  }
  // The rollback as the scheduler reports it, once the servers restored it.
  const Rollback rollback = FirstRollback(cluster);
  std::printf("rolled back from clock %lld to %lld in %lld ms: %s\n",
              static_cast<long long>(rollback.from_clock()),
              static_cast<long long>(rollback.to_clock()),
              static_cast<long long>(rollback.done_unix_ms() - rollback.begun_unix_ms()),
              rollback.reason().c_str());
  ASSERT_GT(rollback.done_unix_ms(), 0) << cluster.Logs();
  EXPECT_EQ(rollback.generation(), 1);
  EXPECT_GT(rollback.to_clock(), 0);
  EXPECT_EQ(rollback.to_clock() % kEvery, 0);
  EXPECT_LE(rollback.from_clock() - rollback.to_clock(), kEvery) << "more updates lost";
  EXPECT_GE(rollback.from_clock(), 95);

  absl::StatusOr<int> code = cluster.WaitAll(absl::Seconds(180));
  ASSERT_TRUE(code.ok()) << code.status() << cluster.Logs();
  EXPECT_EQ(*code, 0) << cluster.Logs();
  // No worker crashed; both servers (the survivor and the replacement) ended well.
  for (Process& w : cluster.workers()) EXPECT_EQ(*w.Wait(absl::ZeroDuration()), 0);
  for (int i = 0; i < static_cast<int>(cluster.servers().size()); ++i) {
    if (i == victim) continue;
    EXPECT_EQ(*cluster.servers()[i].Wait(absl::ZeroDuration()), 0) << i;
  }
  // Replayed from a consistent state: the same model as undisturbed, up to
  // the order in which BSP rounds add two workers' gradients.
  const double diff = MaxDifference(ReadWeights(cluster.worker_weights(0)), calm.weights);
  const double accuracy = FinalAccuracy(cluster);
  std::printf("final test accuracy %.4f (undisturbed %.4f); max |w - w_undisturbed| %.3g\n",
              accuracy, calm.accuracy, diff);
  EXPECT_NEAR(accuracy, calm.accuracy, 0.01);
  EXPECT_LT(diff, 1e-3);
  EXPECT_TRUE(absl::StrContains(rollback.reason(), with_rank ? "replaced by" : "declared dead"))
      << rollback.reason();
}

TEST(RestartTest, AServerKilledAndStartedAgainWithItsIdLosesAtMostCheckpointEveryClocks) {
  KillAndReplaceServer(/*with_rank=*/true, {});
}

TEST(RestartTest, ADeadServerIsReplacedByTheNextServerToRegister) {
  // Workers pushing each layer during the backward (the GPU default) too.
  KillAndReplaceServer(/*with_rank=*/false, {"--overlap=on"});
}

// A live server's id: a new ps_server --id=1 while server 1 answers at its
// address (the operator meant another id) is refused -- exit 3, and the job
// goes on untouched, no rollback -- while a server killed a moment ago,
// not yet declared dead, is replaced at once (the tests above); with
// --replace_live the new one takes the live one's place (a rollback) and
// the job still ends DONE.
TEST(RestartTest, ALiveServersIdIsRefusedUnlessReplaceLiveSaysToTakeIt) {
  Cluster cluster("live_id");
  ASSERT_TRUE(cluster.Start(Options(cluster.dir() + "/ckpt", 2)).ok()) << cluster.Logs();
  ASSERT_TRUE(WaitForClock(cluster, 30)) << cluster.Logs();
  const size_t refused = cluster.servers().size();
  ASSERT_TRUE(cluster.AddServer({"--id=1"}).ok());
  const absl::StatusOr<int> code = cluster.servers()[refused].Wait(absl::Seconds(30));
  ASSERT_TRUE(code.ok()) << cluster.Logs();
  EXPECT_EQ(*code, 3) << cluster.Logs();
  absl::StatusOr<ClusterStatus> st = SchedulerStatus(cluster.scheduler_address());
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->generation(), 0);
  EXPECT_EQ(st->rollbacks_size(), 0);
  EXPECT_EQ(MemberOf(*st, SERVER, 1).state(), RUNNING);

  ASSERT_TRUE(cluster.AddServer({"--id=1", "--replace_live"}).ok());
  const Rollback rollback = FirstRollback(cluster);
  ASSERT_GT(rollback.done_unix_ms(), 0) << cluster.Logs();
  EXPECT_TRUE(absl::StrContains(rollback.reason(), "replaced by")) << rollback.reason();
  const absl::StatusOr<int> end = cluster.WaitAll(absl::Seconds(180));
  ASSERT_TRUE(end.ok()) << end.status() << cluster.Logs();
  EXPECT_EQ(*end, 0) << cluster.Logs();
}

// Other paths through a rollback: SSP (no rounds; the gate lets workers
// drift apart) and BSP with clipping by the global norm (the servers' norm
// reduction of the old generation is refused). Server 0 is killed and replaced;
// the job must finish, every worker with exit 0, having lost at most
// checkpoint_every clocks.
void KillServerZeroUnder(const std::string& from, const std::string& to, const std::string& name) {
  Cluster cluster(name);
  ClusterOptions options = Options(cluster.dir() + "/ckpt", 2);
  options.job_text = absl::StrReplaceAll(Job(), {{from, to}});
  ASSERT_NE(options.job_text, Job());
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.Logs();
  ASSERT_TRUE(WaitForClock(cluster, 60)) << cluster.Logs();
  const int victim = cluster.ServerProcess(0);
  ASSERT_GE(victim, 0) << cluster.Logs();
  cluster.servers()[victim].Kill(SIGKILL);
  ASSERT_TRUE(cluster.AddServer({"--id=0"}).ok());
  const Rollback rollback = FirstRollback(cluster);
  std::printf("%s: rolled back from clock %lld to %lld\n", name.c_str(),
              static_cast<long long>(rollback.from_clock()),
              static_cast<long long>(rollback.to_clock()));
  ASSERT_GT(rollback.done_unix_ms(), 0) << cluster.Logs();
  // Under SSP the fastest worker may be s clocks past the slowest.
  EXPECT_LE(rollback.from_clock() - rollback.to_clock(), kEvery + 2);
  absl::StatusOr<int> code = cluster.WaitAll(absl::Seconds(180));
  ASSERT_TRUE(code.ok()) << code.status() << cluster.Logs();
  EXPECT_EQ(*code, 0) << cluster.Logs();
  for (Process& w : cluster.workers()) EXPECT_EQ(*w.Wait(absl::ZeroDuration()), 0);
  EXPECT_GT(FinalAccuracy(cluster), 0.8);
}

TEST(RestartTest, UnderSspARestartedServerRollsTheClusterBack) {
  KillServerZeroUnder("consistency: BSP", "consistency: SSP staleness: 2", "restart_ssp");
}

TEST(RestartTest, UnderBspWithGlobalClippingARestartedServerRollsTheClusterBack) {
  KillServerZeroUnder("learning_rate: 0.01 }", "learning_rate: 0.01 clip_norm: 0.5 }",
                      "restart_clip");
}

TEST(RestartTest, AWholeJobStartedAgainResumesFromTheManifestWithTheSameDataOrder) {
  // One worker: every run is deterministic, so a resumed job must end with
  // the very weights of an undisturbed one.
  const Undisturbed& calm = Calm(1);
  ASSERT_GT(calm.accuracy, 0);

  const std::string dir = NewTempDir("whole_ckpt");
  {
    Cluster first("whole_first");
    ASSERT_TRUE(first.Start(Options(dir, 1)).ok()) << first.Logs();
    ASSERT_TRUE(WaitForClock(first, 125)) << first.Logs();
    first.scheduler().Kill(SIGKILL);
    for (Process& p : first.servers()) p.Kill(SIGKILL);
    for (Process& p : first.workers()) p.Kill(SIGKILL);
  }
  Cluster second("whole_second");
  ASSERT_TRUE(second.Start(Options(dir, 1)).ok()) << second.Logs();
  absl::StatusOr<int> code = second.WaitAll(absl::Seconds(180));
  ASSERT_TRUE(code.ok()) << code.status() << second.Logs();
  EXPECT_EQ(*code, 0) << second.Logs();
  absl::StatusOr<ClusterStatus> final_status = second.FinalStatus();
  ASSERT_TRUE(final_status.ok()) << final_status.status();
  const int64_t resumed_at = final_status->start_clock();
  std::printf("resumed at clock %lld\n", static_cast<long long>(resumed_at));
  EXPECT_GE(resumed_at, 100) << second.Logs();
  EXPECT_EQ(MemberOf(*final_status, WORKER, 0).worker().start_clock(), resumed_at);
  EXPECT_EQ(MaxDifference(ReadWeights(second.worker_weights(0)), calm.weights), 0.0)
      << second.Logs();
}

}  // namespace
}  // namespace testing
}  // namespace pstrain
