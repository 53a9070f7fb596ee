// A worker cut off from the network for 10 s: it runs in a network namespace
// of its own, joined to the host's by a veth pair whose host end is set down
// and, 10 s later, up again. Under --on_worker_failure=wait the job holds
// the gate and the worker rejoins; under shrink the other worker takes over
// its share and the cut-off worker, declared dead, is told so when it is
// back. Needs root and `ip netns`; without them it skips, saying why.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/cluster.h"
#include "tests/test_jobs.h"

namespace pstrain {
namespace testing {
namespace {

const char kIp[] = "/usr/sbin/ip";

// A network namespace with a veth pair to the host: host end `host_ip`,
// namespace end `ns_ip` (a /30 of its own). Removed on destruction.
class Netns {
 public:
  // Why it cannot be made here, or an empty string.
  static std::string Unavailable() {
    if (geteuid() != 0) return "not root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)";
    if (access(kIp, X_OK) != 0) return absl::StrCat(kIp, " not found (Debian's iproute2)");
    return "";
  }

  explicit Netns(int index) {
    const int id = static_cast<int>(getpid() % 100) * 2 + index;
    name_ = absl::StrCat("pstrain", getpid(), "-", index);
    host_if_ = absl::StrCat("pvh", getpid() % 100000, index);
    ns_if_ = absl::StrCat("pvn", getpid() % 100000, index);
    host_ip_ = absl::StrCat("10.213.", id, ".1");
    ns_ip_ = absl::StrCat("10.213.", id, ".2");
    for (const std::vector<std::string>& argv : std::vector<std::vector<std::string>>{
             {kIp, "netns", "add", name_},
             {kIp, "link", "add", host_if_, "type", "veth", "peer", "name", ns_if_},
             {kIp, "link", "set", ns_if_, "netns", name_},
             {kIp, "addr", "add", host_ip_ + "/30", "dev", host_if_},
             {kIp, "link", "set", host_if_, "up"},
             {kIp, "netns", "exec", name_, kIp, "addr", "add", ns_ip_ + "/30", "dev", ns_if_},
             {kIp, "netns", "exec", name_, kIp, "link", "set", ns_if_, "up"},
             {kIp, "netns", "exec", name_, kIp, "link", "set", "lo", "up"}}) {
      std::string out;
      absl::StatusOr<int> code = RunCommand(argv, &out, absl::Seconds(10), "ip");
      if (!code.ok() || *code != 0) {
        error_ = absl::StrCat(absl::StrJoin(argv, " "), ": ", out);
        return;
      }
    }
  }
  ~Netns() {
    std::string out;
    (void)RunCommand({kIp, "link", "del", host_if_}, &out, absl::Seconds(10), "ip");
    (void)RunCommand({kIp, "netns", "del", name_}, &out, absl::Seconds(10), "ip");
  }
  // Sets the host end of the pair down (the namespace is cut off) or up.
  bool SetLink(bool up) {
    std::string out;
    absl::StatusOr<int> code = RunCommand({kIp, "link", "set", host_if_, up ? "up" : "down"}, &out,
                                          absl::Seconds(10), "ip");
    return code.ok() && *code == 0;
  }

  const std::string& error() const { return error_; }
  const std::string& name() const { return name_; }
  const std::string& host_ip() const { return host_ip_; }
  const std::string& ns_ip() const { return ns_ip_; }

 private:
  std::string name_, host_if_, ns_if_, host_ip_, ns_ip_, error_;
};

struct Member {
  MemberState state = MEMBER_STATE_UNSPECIFIED;
  int64_t clock = -1;
};

Member Worker(const std::string& scheduler, int id) {
  absl::StatusOr<ClusterStatus> st = SchedulerStatus(scheduler);
  if (!st.ok()) return {};
  for (const MemberStatus& m : st->members()) {
    if (m.role() == WORKER && m.id() == id) return {m.state(), m.clock()};
  }
  return {};
}

// Runs the job with worker process 1 in a namespace cut off for 10 s after
// clock 50, under `policy`; `clocks` long enough for the job to outlast the
// cut.
void CutOffAWorker(const std::string& policy, int index, int clocks) {
  if (const std::string why = Netns::Unavailable(); !why.empty()) {
    std::printf("skipped: %s\n", why.c_str());
    GTEST_SKIP() << why;
  }
  Netns ns(index);
  if (!ns.error().empty()) {
    std::printf("skipped: cannot make a network namespace: %s\n", ns.error().c_str());
    GTEST_SKIP() << ns.error();
  }
  Cluster cluster("netns_" + policy);
  ClusterOptions options;
  options.job_text = SixteenClassJob(absl::StrCat("clocks: ", clocks, "\nseed: 5"));
  options.servers = 1;
  options.workers = 2;
  options.host = ns.host_ip();
  options.scheduler_flags = {"--heartbeat_timeout_ms=3000", "--end_grace_ms=3000",
                             "--on_worker_failure=" + policy};
  options.worker_flags = {{"--debug_slowdown_ms=10"}, {"--debug_slowdown_ms=10"}};
  options.worker_prefix = {{}, {kIp, "netns", "exec", ns.name()}};
  options.worker_host = {ns.host_ip(), ns.ns_ip()};
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.Logs();
  const std::string& scheduler = cluster.scheduler_address();
  int cut = -1;  // the id of the worker in the namespace
  for (int i = 0; i < 1000 && cut < 0; ++i) {
    if (Worker(scheduler, 0).clock >= 50 && Worker(scheduler, 1).clock >= 50) {
      cut = cluster.MemberId(WORKER, 1);
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_GE(cut, 0) << cluster.Logs();
  const int other = 1 - cut;

  ASSERT_TRUE(ns.SetLink(false));
  absl::SleepFor(absl::Seconds(4));  // past the heartbeat timeout
  const Member cut_during = Worker(scheduler, cut);
  const int64_t other_at_4s = Worker(scheduler, other).clock;
  absl::SleepFor(absl::Seconds(2));
  const int64_t other_at_6s = Worker(scheduler, other).clock;
  absl::SleepFor(absl::Seconds(4));
  ASSERT_TRUE(ns.SetLink(true));
  std::printf(
      "%s: 4 s into the cut worker %d was %s; the other went from clock %lld to %lld "
      "in the next 2 s\n",
      policy.c_str(), cut, MemberState_Name(cut_during.state).c_str(),
      static_cast<long long>(other_at_4s), static_cast<long long>(other_at_6s));
  EXPECT_EQ(cut_during.state, DEAD);

  absl::StatusOr<int> code = cluster.WaitAll(absl::Seconds(180));
  ASSERT_TRUE(code.ok()) << code.status() << cluster.Logs();
  EXPECT_EQ(*code, 0) << cluster.Logs();
  // Process 1 is the one in the namespace.
  const int cut_code = *cluster.workers()[1].Wait(absl::ZeroDuration());
  const int other_code = *cluster.workers()[0].Wait(absl::ZeroDuration());
  EXPECT_EQ(other_code, 0) << cluster.Logs();
  absl::StatusOr<ClusterStatus> final_status = cluster.FinalStatus();
  ASSERT_TRUE(final_status.ok()) << final_status.status();
  EXPECT_EQ(final_status->job_state(), DONE);
  EXPECT_EQ(MemberOf(*final_status, WORKER, other).state(), FINISHED);
  if (policy == "wait") {
    // The gate held (BSP): the other worker did not move while it was dead;
    // then the cut-off worker rejoined and finished the job.
    EXPECT_EQ(other_at_4s, other_at_6s);
    EXPECT_EQ(cut_code, 0) << cluster.Logs();
    EXPECT_EQ(MemberOf(*final_status, WORKER, cut).state(), FINISHED);
  } else {
    // The other worker went on alone; the cut-off one, back while the job
    // still ran, learned it had been declared dead.
    EXPECT_GT(other_at_6s, other_at_4s);
    EXPECT_EQ(cut_code, 1) << cluster.Logs();
    EXPECT_EQ(MemberOf(*final_status, WORKER, cut).state(), DEAD);
  }
}

TEST(NetnsTest, UnderWaitACutOffWorkerRejoins) { CutOffAWorker("wait", 0, 400); }

TEST(NetnsTest, UnderShrinkTheOtherWorkerTakesOverACutOffWorkersShare) {
  // The other worker alone runs about 90 clocks a second: 1600 clocks
  // outlast the cut.
  CutOffAWorker("shrink", 1, 1600);
}

}  // namespace
}  // namespace testing
}  // namespace pstrain
