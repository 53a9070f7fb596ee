// Faults: a member killed with SIGKILL is declared dead once the scheduler's
// heartbeat timeout passes; Status says when and why, and the job ends with
// a message instead of waiting forever.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/rpc.h"
#include "gtest/gtest.h"
#include "proto/cluster.grpc.pb.h"
#include "tests/cluster.h"
#include "tests/test_jobs.h"
#include "tests/wait.h"

namespace pstrain {
namespace testing {
namespace {

ClusterOptions BspOptions() {
  ClusterOptions options;
  options.job_text = SixteenClassJob("clocks: 300\nseed: 7\nchunk_bytes: 1024");
  options.servers = 1;
  options.workers = 2;
  options.scheduler_flags = {"--heartbeat_timeout_ms=1500", "--end_grace_ms=3000"};
  options.worker_flags = {{"--straggler=fixed:10"}, {"--straggler=fixed:10"}};
  return options;
}

// Training is well under way: worker 0 has trained 50 clocks.
bool UnderWay(const ClusterStatus& st) { return WorkerClock(st, 0) >= 50; }

// Worker `id` as the scheduler's final Status reports it.
MemberStatus FinalWorker(const Cluster& cluster, int id) {
  absl::StatusOr<ClusterStatus> st = cluster.FinalStatus();
  return st.ok() ? MemberOf(*st, WORKER, id) : MemberStatus();
}

// The BSP job undisturbed (run once): its final test accuracy (-1 if it
// failed) and process 0's final weights.
struct UndisturbedRun {
  double accuracy = -1;
  TensorSet weights;
};
const UndisturbedRun& Undisturbed() {
  static const UndisturbedRun* run = [] {
    auto* r = new UndisturbedRun;
    Cluster cluster("undisturbed");
    if (!cluster.Start(BspOptions()).ok() || cluster.WaitAll(absl::Seconds(120)).value_or(1) != 0) {
      return r;
    }
    const MemberStatus w = FinalWorker(cluster, 0);
    if (w.state() != FINISHED) return r;
    r->accuracy = w.worker().test_accuracy();
    r->weights = ReadWeights(cluster.worker_weights(0));
    return r;
  }();
  return *run;
}
double UndisturbedAccuracy() { return Undisturbed().accuracy; }

// Starts a replacement with the dead worker's id and waits for the job to
// end: every process exits 0; the replacement's final Status.
MemberStatus ReplaceAndFinish(Cluster& cluster, int victim) {
  EXPECT_TRUE(cluster.AddWorker({absl::StrCat("--id=", victim)}).ok());
  absl::StatusOr<int> code = cluster.WaitAll(absl::Seconds(120));
  EXPECT_TRUE(code.ok()) << code.status() << cluster.Logs();
  if (!code.ok()) return MemberStatus();
  EXPECT_EQ(*code, 0) << cluster.Logs();
  EXPECT_EQ(*cluster.workers().back().Wait(absl::ZeroDuration()), 0) << cluster.Logs();
  return FinalWorker(cluster, victim);
}

// The clock whose push the held-push tests hold back.
constexpr int64_t kHeld = 60;

// Starts the BSP job under --on_worker_failure=wait with process 1's push of
// kHeld held back (--debug_hold_push; `flags` go to both workers), SIGKILLs
// process 1 `settle` after it reported kHeld finished, waits until it is
// declared dead, then replaces it and waits for the end (ReplaceAndFinish):
// the replacement's final Status, or an empty one after a failed EXPECT.
MemberStatus KillTheHolderAndReplaceIt(Cluster& cluster, const std::vector<std::string>& flags,
                                       absl::Duration settle,
                                       const std::vector<std::string>& scheduler_flags = {}) {
  ClusterOptions options = BspOptions();
  options.scheduler_flags.push_back("--on_worker_failure=wait");
  options.scheduler_flags.insert(options.scheduler_flags.end(), scheduler_flags.begin(),
                                 scheduler_flags.end());
  for (std::vector<std::string>& f : options.worker_flags) {
    f.insert(f.end(), flags.begin(), flags.end());
  }
  options.worker_flags[1].push_back(absl::StrCat("--debug_hold_push=", kHeld));
  const absl::Status started = cluster.Start(options);
  EXPECT_TRUE(started.ok()) << started << cluster.Logs();
  if (!started.ok()) return MemberStatus();
  // Process 1 reported clock kHeld finished, its push of kHeld held back.
  int victim = -1;
  const bool held = WaitForStatus(
      cluster.scheduler_address(),
      [&](const ClusterStatus& st) {
        victim = cluster.MemberId(WORKER, 1);
        return victim >= 0 && WorkerClock(st, victim) == kHeld + 1;
      },
      absl::Seconds(60));
  EXPECT_TRUE(held) << cluster.Logs();
  if (!held) return MemberStatus();
  absl::SleepFor(settle);
  cluster.workers()[1].Kill(SIGKILL);
  const bool dead = WaitForStatus(
      cluster.scheduler_address(),
      [&](const ClusterStatus& st) { return MemberOf(st, WORKER, victim).state() == DEAD; },
      absl::Seconds(4 + LoadPerCore()));
  EXPECT_TRUE(dead) << cluster.Logs();
  if (!dead) return MemberStatus();
  return ReplaceAndFinish(cluster, victim);
}

TEST(FaultTest, UnderBspTheOtherWorkerGoesOnWithoutAKilledOne) {
  const double undisturbed = UndisturbedAccuracy();
  Cluster cluster("shrink");
  ASSERT_TRUE(cluster.Start(BspOptions()).ok()) << cluster.Logs();
  // Wait until training is well under way; learn which id the survivor has.
  ASSERT_TRUE(WaitForStatus(cluster.scheduler_address(), UnderWay, absl::Seconds(60)))
      << cluster.Logs();
  // Process 1 is killed; the survivor is process 0's id.
  const int survivor = cluster.MemberId(WORKER, 0);
  ASSERT_GE(survivor, 0) << cluster.Logs();
  const absl::Time killed = absl::Now();
  cluster.workers()[1].Kill(SIGKILL);
  // Blocked at the gate by now; then it must go on within the heartbeat
  // timeout + 1 s.
  absl::SleepFor(absl::Milliseconds(300));
  int64_t blocked_at = -1;
  if (absl::StatusOr<ClusterStatus> st = SchedulerStatus(cluster.scheduler_address()); st.ok()) {
    blocked_at = WorkerClock(*st, survivor);
  }
  ASSERT_GE(blocked_at, 0);
  absl::Duration resumed = absl::InfiniteDuration();
  if (WaitForStatus(
          cluster.scheduler_address(),
          [&](const ClusterStatus& st) { return WorkerClock(st, survivor) > blocked_at + 1; },
          absl::Seconds(8))) {
    resumed = absl::Now() - killed;
  }
  // The heartbeat timeout and 1 s, the second scaled by the load per core
  // (2.56 s was seen at a load of 12 on 2 cores).
  const absl::Duration allowed =
      absl::Milliseconds(1500) + absl::Seconds(std::max(1.0, LoadPerCore()));
  std::printf(
      "the survivor went on %.2f s after the kill (heartbeat timeout 1.5 s, allowed %.2f s)\n",
      absl::ToDoubleSeconds(resumed), absl::ToDoubleSeconds(allowed));
  EXPECT_LT(resumed, allowed);
  // The job completes, and the survivor's model is as good as undisturbed.
  absl::StatusOr<int> code = cluster.WaitAll(absl::Seconds(120));
  ASSERT_TRUE(code.ok()) << code.status() << cluster.Logs();
  EXPECT_EQ(*code, 0) << cluster.Logs();
  // The survivor finished every clock alone; the other is dead.
  absl::StatusOr<ClusterStatus> final_status = cluster.FinalStatus();
  ASSERT_TRUE(final_status.ok()) << final_status.status();
  EXPECT_EQ(final_status->job_state(), DONE);
  const MemberStatus alive = MemberOf(*final_status, WORKER, survivor);
  EXPECT_EQ(alive.state(), FINISHED);
  EXPECT_EQ(alive.clock(), final_status->total_clocks());
  EXPECT_EQ(MemberOf(*final_status, WORKER, 1 - survivor).state(), DEAD);
  const double accuracy = alive.worker().test_accuracy();
  std::printf("final test accuracy %.4f, undisturbed %.4f\n", accuracy, undisturbed);
  ASSERT_GT(undisturbed, 0);
  EXPECT_NEAR(accuracy, undisturbed, 0.01);
}

TEST(FaultTest, UnderWaitAReplacementTakesOverAKilledWorkersId) {
  const double undisturbed = UndisturbedAccuracy();
  ASSERT_GT(undisturbed, 0);
  Cluster cluster("wait");
  ClusterOptions options = BspOptions();
  options.scheduler_flags.push_back("--on_worker_failure=wait");
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.Logs();
  ASSERT_TRUE(WaitForStatus(cluster.scheduler_address(), UnderWay, absl::Seconds(60)))
      << cluster.Logs();
  const int victim = cluster.MemberId(WORKER, 1);  // the id of process 1
  ASSERT_GE(victim, 0) << cluster.Logs();
  cluster.workers()[1].Kill(SIGKILL);
  // Declared dead; the gate holds the survivor meanwhile (BSP).
  int64_t held_at = -1;
  ASSERT_TRUE(WaitForStatus(
      cluster.scheduler_address(),
      [&](const ClusterStatus& st) {
        if (MemberOf(st, WORKER, victim).state() != DEAD) return false;
        held_at = WorkerClock(st, 1 - victim);
        return true;
      },
      absl::Seconds(4)))
      << cluster.Logs();
  ASSERT_GE(held_at, 0) << cluster.Logs();
  absl::SleepFor(absl::Milliseconds(500));
  absl::StatusOr<ClusterStatus> later = SchedulerStatus(cluster.scheduler_address());
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(WorkerClock(*later, 1 - victim), held_at) << "the gate did not hold";
  const MemberStatus replacement = ReplaceAndFinish(cluster, victim);
  // The replacement finished the id's clocks from where the dead one's
  // pushes were known to have landed: under BSP the dead one was one clock
  // behind the held survivor, and its gate report went out with the push of
  // the clock before, so the replacement starts one or two behind.
  EXPECT_EQ(replacement.state(), FINISHED);
  EXPECT_GE(replacement.worker().start_clock(), held_at - 2);
  EXPECT_LE(replacement.worker().start_clock(), held_at);
  const double accuracy = replacement.worker().test_accuracy();
  std::printf(
      "the replacement took id %d at clock %lld (the survivor held at %lld); final "
      "test accuracy %.4f, undisturbed %.4f\n",
      victim, static_cast<long long>(replacement.worker().start_clock()),
      static_cast<long long>(held_at), accuracy, undisturbed);
  EXPECT_NEAR(accuracy, undisturbed, 0.01);
}

// A worker's gate report goes out while its last push is still on its
// way. Here that push never goes (--debug_hold_push) and the worker is
// killed: its replacement must make the push itself -- starting at the
// clock after the dead one's, the server (which never saw the push) would
// refuse the replacement's next one and the job could not go on.
TEST(FaultTest, UnderWaitAReplacementMakesThePushItsPredecessorNeverSent) {
  const double undisturbed = UndisturbedAccuracy();
  ASSERT_GT(undisturbed, 0);
  Cluster cluster("unsent");
  // The whole gradient in one push, held whole (the test below holds one
  // layer's).
  const MemberStatus replacement =
      KillTheHolderAndReplaceIt(cluster, {"--overlap=off"}, absl::ZeroDuration());
  // It went through the held clock again, and BSP ended where it would have
  // without the kill.
  EXPECT_EQ(replacement.state(), FINISHED);
  EXPECT_EQ(replacement.worker().start_clock(), kHeld);
  std::printf(
      "the replacement started at clock %lld (the push of %lld was never sent); "
      "final test accuracy %.4f, undisturbed %.4f\n",
      static_cast<long long>(replacement.worker().start_clock()), static_cast<long long>(kHeld),
      replacement.worker().test_accuracy(), undisturbed);
  EXPECT_DOUBLE_EQ(replacement.worker().test_accuracy(), undisturbed);
  EXPECT_EQ(MaxDifference(ReadWeights(cluster.worker_weights(0)), Undisturbed().weights), 0);
}

// Pushing layer by layer (--overlap=on), a worker killed in the middle of
// a clock's pushes leaves the clock pushed for its last layers and not for
// its first (here that push is held): under BSP the last layers' chunks
// closed the round and applied it. The replacement goes through the clock
// again from the weights it pulls -- the last layers already updated -- so
// the first layer's repeated gradient is not the lost one. The job ends
// with every process's exit 0, near the undisturbed run but not
// bit-identical to it (docs/failures.md: the same as a whole-gradient push
// that reached one server and not another).
TEST(FaultTest, PushingByLayersAReplacementRedoesAHalfPushedClockFromNewerWeights) {
  const UndisturbedRun& undisturbed = Undisturbed();
  ASSERT_GT(undisturbed.accuracy, 0);
  Cluster cluster("halfpushed");
  // The last layers' pushes went on the push lane before the held one:
  // a second for them to land before the kill.
  const MemberStatus replacement =
      KillTheHolderAndReplaceIt(cluster, {"--overlap=on"}, absl::Seconds(1));
  EXPECT_EQ(replacement.state(), FINISHED);
  EXPECT_EQ(replacement.worker().start_clock(), kHeld);
  const double difference =
      MaxDifference(ReadWeights(cluster.worker_weights(0)), undisturbed.weights);
  std::printf(
      "the replacement started at clock %lld; final test accuracy %.4f, undisturbed "
      "%.4f; max |w - undisturbed w| %.3g of max |w| %.3g\n",
      static_cast<long long>(replacement.worker().start_clock()),
      replacement.worker().test_accuracy(), undisturbed.accuracy, difference,
      MaxMagnitude(undisturbed.weights));
  EXPECT_GT(difference, 0) << "the first layer's lost gradient was made again exactly";
  EXPECT_NEAR(replacement.worker().test_accuracy(), undisturbed.accuracy, 0.01);
}

// The same with checkpoints (issue 66): the replacement's pull of clock 60
// shows its predecessor's push of it applied on some chunks and missing on
// others (PullResponse.own_applied_most, .own_held_least), so it asks for
// a rollback instead of redoing the clock from newer weights
// (AdvanceClockRequest.redo_inexact); the cluster goes back to the
// checkpoint of clock 60 and ends bit-identical to the undisturbed run.
TEST(FaultTest, PushingByLayersAHalfPushedClockWithCheckpointsRollsBackAndEndsBitIdentical) {
  const UndisturbedRun& undisturbed = Undisturbed();
  ASSERT_GT(undisturbed.accuracy, 0);
  Cluster cluster("halfpushed_checkpoints");
  const MemberStatus replacement = KillTheHolderAndReplaceIt(
      cluster, {"--overlap=on"}, absl::Seconds(1),
      {"--checkpoint_every=20", "--checkpoint_dir=" + cluster.dir() + "/checkpoints"});
  EXPECT_EQ(replacement.state(), FINISHED);
  absl::StatusOr<ClusterStatus> end = cluster.FinalStatus();
  ASSERT_TRUE(end.ok()) << end.status();
  ASSERT_EQ(end->rollbacks_size(), 1) << cluster.Logs();
  EXPECT_TRUE(end->rollbacks(0).redo()) << end->rollbacks(0).reason();
  EXPECT_EQ(end->rollbacks(0).to_clock(), kHeld);
  const double difference =
      MaxDifference(ReadWeights(cluster.worker_weights(0)), undisturbed.weights);
  std::printf("a half-pushed clock %lld with checkpoints: rolled back to clock %lld (%s); max |w - "
              "undisturbed w| %g\n",
              static_cast<long long>(kHeld),
              static_cast<long long>(end->rollbacks(0).to_clock()),
              end->rollbacks(0).reason().c_str(), difference);
  EXPECT_EQ(difference, 0.0);
  EXPECT_DOUBLE_EQ(replacement.worker().test_accuracy(), undisturbed.accuracy);
}

// A server killed as the job reaches its end -- after the worker's last
// read (its weights written), before the scheduler declares the job DONE --
// never reports its end: the scheduler declares it dead before it writes
// the final status (issue 66), which shows each member's real end.
TEST(FaultTest, AServerKilledAsTheJobEndsIsDeadInTheFinalStatus) {
  Cluster cluster("kill_at_end");
  ClusterOptions options = BspOptions();
  options.servers = 2;
  options.workers = 1;
  options.worker_flags = {{}};
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.Logs();
  const absl::Time until = absl::Now() + absl::Seconds(120);
  while (ReadFile(cluster.worker_weights(0)).empty() && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  ASSERT_FALSE(ReadFile(cluster.worker_weights(0)).empty()) << cluster.Logs();
  const absl::Time killed = absl::Now();
  const int victim = cluster.ServerProcess(1);
  ASSERT_GE(victim, 0);
  cluster.servers()[victim].Kill(SIGKILL);
  absl::StatusOr<int> code = cluster.WaitAll(absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << code.status() << cluster.Logs();
  absl::StatusOr<ClusterStatus> end = cluster.FinalStatus();
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->job_state(), DONE) << cluster.Logs();
  const MemberStatus dead = MemberOf(*end, SERVER, 1);
  EXPECT_EQ(dead.state(), DEAD) << dead.ShortDebugString();
  EXPECT_GT(dead.declared_dead_unix_ms(), absl::ToUnixMillis(killed));
  EXPECT_EQ(MemberOf(*end, SERVER, 0).state(), FINISHED);
  EXPECT_EQ(MemberOf(*end, WORKER, 0).state(), FINISHED);
  std::printf("server 1 killed as the job ended: %s in the final status, declared dead %.2f s "
              "later\n",
              MemberState_Name(dead.state()).c_str(),
              (dead.declared_dead_unix_ms() - absl::ToUnixMillis(killed)) / 1e3);
}

TEST(FaultTest, AKilledWorkerIsDeclaredDeadAndNobodyHangs) {
  Cluster cluster("kill");
  ClusterOptions options;
  options.job_text = SmallJob("batch_size: 16\nclocks: 2000\n");
  options.servers = 1;
  options.workers = 2;
  // --linger_ms: the scheduler answers Status for a while after the abort.
  options.scheduler_flags = {"--heartbeat_timeout_ms=1500", "--end_grace_ms=3000",
                             "--linger_ms=5000", "--on_worker_failure=abort"};
  options.worker_flags = {{"--straggler=fixed:20"}, {"--straggler=fixed:20"}};
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.Logs();
  // Let training begin.
  const bool training = WaitForStatus(
      cluster.scheduler_address(), [](const ClusterStatus& st) { return WorkersAt(st, 5) > 0; },
      absl::Seconds(60), absl::Milliseconds(50));
  ASSERT_TRUE(training) << cluster.Logs();
  const absl::Time killed = absl::Now();
  cluster.workers()[1].Kill(SIGKILL);
  // Until it is declared dead, the other worker waits at the gate, and the
  // scheduler's Status says so.
  const bool gate_wait_seen = WaitForStatus(
      cluster.scheduler_address(),
      [](const ClusterStatus& st) {
        for (const Wait& w : st.scheduler().waits()) {
          if (absl::StrContains(w.what(), "at the gate of clock") && w.since_unix_ms() > 0) {
            return true;
          }
        }
        return false;
      },
      absl::Seconds(1), absl::Milliseconds(25));
  EXPECT_TRUE(gate_wait_seen);

  // Declared dead after the timeout, with when and why.
  MemberStatus dead;
  WaitForStatus(
      cluster.scheduler_address(),
      [&](const ClusterStatus& st) {
        for (const MemberStatus& m : st.members()) {
          if (m.state() == DEAD) dead = m;
        }
        return dead.state() == DEAD;
      },
      absl::Seconds(10), absl::Milliseconds(50));
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
  absl::StatusOr<ClusterStatus> final_status = cluster.FinalStatus();
  ASSERT_TRUE(final_status.ok()) << final_status.status();
  EXPECT_EQ(final_status->job_state(), ABORTED);
  EXPECT_EQ(MemberOf(*final_status, WORKER, dead.id()).state(), DEAD);
  EXPECT_EQ(cluster.workers()[0].Wait(absl::ZeroDuration()).value_or(-1), 1) << cluster.Logs();
  EXPECT_EQ(cluster.servers()[0].Wait(absl::ZeroDuration()).value_or(-1), 1) << cluster.Logs();
}

}  // namespace
}  // namespace testing
}  // namespace pstrain
