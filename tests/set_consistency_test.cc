// psctl set-consistency on a running job: BSP, then SSP with s = 3, then BSP
// again. Checked from the daemons' traces, not from timing: the gate's lead
// follows each mode from the clock the change names, every worker's update
// of every clock is applied exactly once to every chunk, and the reads obey
// the bound in force; the final accuracy matches an all-BSP run.
#include <algorithm>
#include <functional>
#include <map>
#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/trace.h"
#include "gtest/gtest.h"
#include "tests/cluster.h"
#include "tests/test_jobs.h"
#include "tests/wait.h"

namespace pstrain {
namespace testing {
namespace {

constexpr int kWorkers = 2;
constexpr int kClocks = 500;

ClusterOptions Options() {
  ClusterOptions options;
  options.job_text = SixteenClassJob(absl::StrCat("clocks: ", kClocks, "\nseed: 11\n"));
  options.servers = 2;
  options.workers = kWorkers;
  options.trace = true;
  options.worker_flags = {{}, {"--straggler=fixed:10"}};  // worker 1 is slow
  return options;
}

// The largest spread of the gate's clock table (Status.worker_clocks) seen
// while polling until the slowest worker reaches `until`.
int64_t SpreadUntil(const std::string& scheduler, int64_t until) {
  int64_t widest = 0;
  WaitForStatus(
      scheduler,
      [&](const ClusterStatus& st) {
        if (st.worker_clocks_size() == 0) return false;
        const auto [lo, hi] =
            std::minmax_element(st.worker_clocks().begin(), st.worker_clocks().end());
        widest = std::max(widest, *hi - *lo);
        return *lo >= until;
      },
      absl::Seconds(60), absl::Milliseconds(5));
  return widest;
}

bool WaitForSlowest(const std::string& scheduler, int64_t clock) {
  return WaitForStatus(
      scheduler, [&](const ClusterStatus& st) { return SlowestClock(st) >= clock; },
      absl::Seconds(60), absl::Milliseconds(50));
}

// psctl set-consistency; the clock it takes effect at (-1 on failure).
int64_t SetConsistency(const std::string& scheduler, const std::vector<std::string>& flags,
                       std::string* said) {
  std::vector<std::string> argv = {BinaryPath("tools/psctl"), "set-consistency",
                                   "--scheduler=" + scheduler, "--json"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  absl::StatusOr<int> code = RunCommand(argv, said, absl::Seconds(30), "psctl");
  std::smatch m;
  if (!code.ok() || *code != 0 || !std::regex_search(*said, m, std::regex("\"clock\": ([0-9]+)"))) {
    return -1;
  }
  return std::stoll(m[1]);
}

// From the scheduler's trace: the most a worker started ahead of the
// slowest worker's finished clock where bound(clock) is 0 (BSP), and where
// it is above 0; no start may lead by more than its clock's bound.
std::pair<int64_t, int64_t> Leads(const Cluster& cluster,
                                  const std::function<int64_t(int64_t)>& bound) {
  absl::StatusOr<std::vector<TraceEvent>> sched = ReadTrace(cluster.scheduler_trace());
  EXPECT_TRUE(sched.ok()) << sched.status();
  std::vector<int64_t> clocks(kWorkers, 0);
  int64_t lead_bsp = 0, lead_stale = 0;
  for (const TraceEvent& e : sched.value_or(std::vector<TraceEvent>{})) {
    if (e.event() == "clock") clocks[e.worker()] = e.clock();
    if (e.event() != "start") continue;
    const int64_t lead = e.clock() - *std::min_element(clocks.begin(), clocks.end());
    EXPECT_LE(lead, bound(e.clock())) << "worker " << e.worker() << " started " << e.clock();
    int64_t& most = bound(e.clock()) > 0 ? lead_stale : lead_bsp;
    most = std::max(most, lead);
  }
  return {lead_bsp, lead_stale};
}

double FinalAccuracy(const Cluster& cluster) {
  absl::StatusOr<ClusterStatus> st = cluster.FinalStatus();
  if (!st.ok()) return -1;
  return MemberOf(*st, WORKER, 0).worker().test_accuracy();
}

TEST(SetConsistencyTest, BspToSspAndBackAppliesEveryUpdateOnceAndFollowsTheBound) {
  Cluster bsp("all_bsp");
  ASSERT_TRUE(bsp.Start(Options()).ok()) << bsp.Logs();
  absl::StatusOr<int> code = bsp.WaitAll(absl::Seconds(120));
  ASSERT_TRUE(code.ok() && *code == 0) << bsp.Logs();
  const double bsp_accuracy = FinalAccuracy(bsp);

  Cluster cluster("switched");
  ASSERT_TRUE(cluster.Start(Options()).ok()) << cluster.Logs();
  const std::string& scheduler = cluster.scheduler_address();
  // The clock spread in Status follows the mode: at most 1 under BSP (a
  // worker that reported may be a clock ahead), up to s + 1 under SSP.
  EXPECT_LE(SpreadUntil(scheduler, 30), 1);
  std::string said;
  const int64_t to_ssp = SetConsistency(scheduler, {"--mode=ssp", "--staleness=3"}, &said);
  ASSERT_GT(to_ssp, 30) << said;
  ASSERT_TRUE(WaitForSlowest(scheduler, to_ssp + 5)) << cluster.Logs();
  const int64_t ssp_spread = SpreadUntil(scheduler, to_ssp + 60);
  EXPECT_GE(ssp_spread, 3);
  EXPECT_LE(ssp_spread, 4);
  absl::StatusOr<ClusterStatus> mid = SchedulerStatus(scheduler);
  ASSERT_TRUE(mid.ok());
  EXPECT_EQ(mid->consistency(), SSP);
  EXPECT_EQ(mid->staleness(), 3);
  const int64_t to_bsp = SetConsistency(scheduler, {"--mode=bsp"}, &said);
  ASSERT_GT(to_bsp, to_ssp + 60) << said;
  ASSERT_TRUE(WaitForSlowest(scheduler, to_bsp + 2)) << cluster.Logs();
  EXPECT_LE(SpreadUntil(scheduler, to_bsp + 60), 1);
  code = cluster.WaitAll(absl::Seconds(120));
  ASSERT_TRUE(code.ok() && *code == 0) << cluster.Logs();
  absl::StatusOr<ClusterStatus> end = cluster.FinalStatus();
  ASSERT_TRUE(end.ok());
  ASSERT_EQ(end->consistency_changes_size(), 2);
  EXPECT_EQ(end->consistency_changes(0).clock(), to_ssp);
  EXPECT_EQ(end->consistency(), BSP);

  // The bound of iteration c.
  auto bound = [&](int64_t c) -> int64_t { return c >= to_ssp && c < to_bsp ? 3 : 0; };

  // --- The gate: how far a worker started ahead of the slowest, per mode.
  const auto [lead_bsp, lead_ssp] = Leads(cluster, bound);
  EXPECT_EQ(lead_bsp, 0);
  EXPECT_EQ(lead_ssp, 3) << "under SSP the fast worker uses the bound";

  // --- Every update applied once, in order; every read under its bound.
  for (int s = 0; s < 2; ++s) {
    absl::StatusOr<std::vector<TraceEvent>> events = ReadTrace(cluster.server_trace(s));
    ASSERT_TRUE(events.ok()) << events.status();
    std::map<int, std::vector<int64_t>> applied;  // chunk -> per worker
    for (const TraceEvent& e : *events) {
      std::vector<int64_t>& a = applied[e.chunk()];
      a.resize(kWorkers, 0);
      if (e.event() == "apply") {
        ASSERT_EQ(e.clock(), a[e.worker()]) << "applied once each, in order";
        a[e.worker()] = e.clock() + 1;
      } else if (e.event() == "pull" && e.clock() < kClocks) {
        const int64_t required = std::max<int64_t>(0, e.clock() - bound(e.clock()));
        ASSERT_EQ(e.min_clock(), required) << "read for iteration " << e.clock();
        for (int w = 0; w < kWorkers; ++w) ASSERT_GE(a[w], required);
      }
    }
    ASSERT_FALSE(applied.empty());
    for (const auto& [chunk, a] : applied) {
      for (int w = 0; w < kWorkers; ++w) EXPECT_EQ(a[w], kClocks) << "chunk " << chunk;
    }
  }

  const double accuracy = FinalAccuracy(cluster);
  std::printf("accuracy: all BSP %.4f, BSP -> SSP(3) at %lld -> BSP at %lld: %.4f\n", bsp_accuracy,
              static_cast<long long>(to_ssp), static_cast<long long>(to_bsp), accuracy);
  // Every update was applied once (above); what the SSP stretch changes is
  // the order of reads, so the model differs a little: within 2 standard
  // errors of an accuracy near 0.88 on 1024 test examples (0.01 each). Runs
  // here moved it by -0.002 to +0.006 (the switch lands at clock 36 to 43).
  EXPECT_NEAR(accuracy, bsp_accuracy, 0.02);
}

// The job's own plan (JobSpec.consistency_plan): BSP for a warm-up of 40
// clocks, then SSP s = 2, with no psctl: the gate follows each mode from
// the clock the plan names, Status lists the change, the job ends.
TEST(SetConsistencyTest, AJobSwitchesWhereItsPlanSays) {
  constexpr int64_t kSwitch = 40;
  Cluster cluster("planned");
  ClusterOptions options = Options();
  options.job_text =
      SixteenClassJob(absl::StrCat("clocks: 160\nseed: 11\n", "consistency_plan { clock: ", kSwitch,
                                   " consistency: SSP staleness: 2 }\n"));
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.Logs();
  absl::StatusOr<int> code = cluster.WaitAll(absl::Seconds(120));
  ASSERT_TRUE(code.ok() && *code == 0) << cluster.Logs();
  absl::StatusOr<ClusterStatus> end = cluster.FinalStatus();
  ASSERT_TRUE(end.ok());
  ASSERT_EQ(end->consistency_changes_size(), 1);
  EXPECT_EQ(end->consistency_changes(0).clock(), kSwitch);
  EXPECT_EQ(end->consistency(), SSP);
  const auto [lead_bsp, lead_ssp] =
      Leads(cluster, [&](int64_t c) -> int64_t { return c < kSwitch ? 0 : 2; });
  EXPECT_EQ(lead_bsp, 0);
  EXPECT_EQ(lead_ssp, 2) << "from the planned clock on the fast worker uses the bound";
}

TEST(SetConsistencyTest, BadRequestsAreRefused) {
  Cluster cluster("refused");
  ClusterOptions options = Options();
  options.job_text = SixteenClassJob("clocks: 2000\nseed: 11\n");
  options.scheduler_flags = {"--consistency=ssp", "--staleness=2"};
  options.trace = false;
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.Logs();
  ASSERT_TRUE(WaitForSlowest(cluster.scheduler_address(), 3)) << cluster.Logs();
  std::string said;
  // An SSP job has no round sums to go to BSP with; ASP it may.
  EXPECT_EQ(SetConsistency(cluster.scheduler_address(), {"--mode=bsp"}, &said), -1);
  EXPECT_NE(said.find("cannot go to BSP"), std::string::npos) << said;
  EXPECT_EQ(SetConsistency(cluster.scheduler_address(), {"--mode=ssp"}, &said), -1);
  EXPECT_NE(said.find("--staleness"), std::string::npos) << said;
  EXPECT_EQ(SetConsistency(cluster.scheduler_address(), {"--mode=fast"}, &said), -1);
  EXPECT_NE(said.find("--mode=fast"), std::string::npos) << said;
  EXPECT_GT(SetConsistency(cluster.scheduler_address(), {"--mode=asp"}, &said), 3) << said;
  cluster.scheduler().Kill(SIGTERM);
}

}  // namespace
}  // namespace testing
}  // namespace pstrain
