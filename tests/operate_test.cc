// Operating a running cluster: every daemon's /metrics (scraped twice,
// every line parsed against the exposition format) and the scheduler's
// dashboard, loaded in headless Chromium.
#include <cstdlib>
#include <regex>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "proto/member.pb.h"
#include "proto/status.pb.h"
#include "tests/cluster.h"
#include "tests/prometheus_parser.h"
#include "tests/test_jobs.h"
#include "tests/wait.h"

namespace pstrain {
namespace testing {
namespace {

using Families = std::map<std::string, PromFamily>;

// A running 2 + 2 cluster with /metrics on every daemon; the scheduler's
// Status once every member reports its metrics address and both workers
// have trained a few clocks.
class OperateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ClusterOptions options;
    // Long enough to outlast every test (the cluster is killed after each).
    // A sparse table too (no worker uses it): the dashboard draws its lines.
    options.job_text = SmallJob(
        "batch_size: 32\nclocks: 4000\ntables { name: \"words\" width: 8 memory_budget_bytes: "
        "1048576 }\n");
    options.servers = 2;
    options.workers = 2;
    options.scheduler_flags = {"--metrics_port=0", "--run_dir=" + cluster_.dir() + "/run"};
    options.server_flags = {"--metrics_port=0"};
    options.worker_flags = {{"--metrics_port=0", "--straggler=fixed:20"},
                            {"--metrics_port=0", "--straggler=fixed:20"}};
    ASSERT_TRUE(cluster_.Start(options).ok()) << cluster_.Logs();
    const bool ready = WaitForStatus(
        cluster_.scheduler_address(),
        [&](const ClusterStatus& st) {
          status_ = st;
          return Ready(st);
        },
        absl::Seconds(30), absl::Milliseconds(200));
    ASSERT_TRUE(ready) << "the cluster did not start training\n" << cluster_.Logs();
  }

  static bool Ready(const ClusterStatus& st) {
    if (st.job_state() != RUNNING_JOB || st.scheduler().metrics_address().empty()) return false;
    int ready = 0;
    for (const MemberStatus& m : st.members()) {
      ready += !m.metrics_address().empty() && (m.role() == SERVER || m.clock() >= 3);
    }
    return ready == 4;
  }

  // Every daemon's metrics address, scheduler first.
  std::vector<std::string> MetricsAddresses() const {
    std::vector<std::string> out = {status_.scheduler().metrics_address()};
    for (const MemberStatus& m : status_.members()) out.push_back(m.metrics_address());
    return out;
  }

  Cluster cluster_{"operate"};
  ClusterStatus status_;
};

absl::StatusOr<Families> Scrape(const std::string& address) {
  absl::StatusOr<HttpReply> reply = HttpGet(address, "/metrics");
  if (!reply.ok()) return reply.status();
  if (reply->code != 200) return absl::InternalError(absl::StrCat("HTTP ", reply->code));
  if (reply->headers.find("text/plain; version=0.0.4") == std::string::npos) {
    return absl::InternalError("not the text exposition format: " + reply->headers);
  }
  return ParsePrometheusText(reply->body);
}

TEST_F(OperateTest, EveryDaemonsMetricsParseAndMoveBetweenScrapes) {
  const std::vector<std::string> addresses = MetricsAddresses();
  ASSERT_EQ(addresses.size(), 5u);
  std::vector<Families> first;
  for (const std::string& a : addresses) {
    absl::StatusOr<Families> f = Scrape(a);
    ASSERT_TRUE(f.ok()) << a << ": " << f.status();
    first.push_back(*f);
  }
  absl::SleepFor(absl::Seconds(1));
  for (size_t i = 0; i < addresses.size(); ++i) {
    absl::StatusOr<Families> second = Scrape(addresses[i]);
    ASSERT_TRUE(second.ok()) << addresses[i] << ": " << second.status();
    if (i == 0) {  // the scheduler: the job's clock and its members
      EXPECT_EQ(*PromValue(*second, "pstrain_live_members", {{"member_role", "worker"}}), 2);
      EXPECT_EQ(*PromValue(*second, "pstrain_live_members", {{"member_role", "server"}}), 2);
      EXPECT_EQ(*PromValue(*second, "pstrain_staleness", {}), 0);
      EXPECT_GT(*PromValue(*second, "pstrain_clock", {{"role", "scheduler"}}),
                *PromValue(first[0], "pstrain_clock", {{"role", "scheduler"}}));
      continue;
    }
    const MemberStatus& m = status_.members(static_cast<int>(i) - 1);
    const std::string role = m.role() == SERVER ? "server" : "worker";
    const std::map<std::string, std::string> me = {{"role", role}, {"id", absl::StrCat(m.id())}};
    for (const char* counter : {"pstrain_pushes_total", "pstrain_pulls_total",
                                "pstrain_received_bytes_total", "pstrain_sent_bytes_total"}) {
      EXPECT_GT(*PromValue(*second, counter, me), *PromValue(first[i], counter, me))
          << role << " " << m.id() << " " << counter;
    }
    EXPECT_GT(*PromValue(*second, "pstrain_push_duration_seconds_count", me),
              *PromValue(first[i], "pstrain_push_duration_seconds_count", me));
    if (m.role() == SERVER) {
      EXPECT_GT(*PromValue(*second, "pstrain_optimizer_update_duration_seconds_count", me),
                *PromValue(first[i], "pstrain_optimizer_update_duration_seconds_count", me));
    } else {
      EXPECT_GT(*PromValue(*second, "pstrain_gate_wait_duration_seconds_count", me),
                *PromValue(first[i], "pstrain_gate_wait_duration_seconds_count", me));
      EXPECT_GT(*PromValue(*second, "pstrain_loss", me), 0);
    }
  }
  // Only GET of known paths.
  EXPECT_EQ(HttpGet(addresses[1], "/nothing")->code, 404);
}

int Count(const std::string& text, const std::string& pattern) {
  const std::regex re(pattern);
  return static_cast<int>(
      std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator()));
}

TEST_F(OperateTest, TheDashboardDrawsTheMembersAndALossCurve) {
  const std::string url = "http://" + status_.scheduler().metrics_address() + "/";
  // Let a few history points gather (one per 200 ms of progress).
  absl::SleepFor(absl::Seconds(2));
  const char* artifacts = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  const std::string out_dir = artifacts != nullptr ? artifacts : cluster_.dir();
  const std::vector<std::string> chromium = {
      "/usr/bin/chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
      "--user-data-dir=" + cluster_.dir() + "/chromium", "--virtual-time-budget=3000",
      "--window-size=1400,900"};
  std::vector<std::string> dump = chromium;
  dump.insert(dump.end(), {"--dump-dom", url});
  std::string dom;
  absl::StatusOr<int> code = RunCommand(dump, &dom, absl::Seconds(60), "chromium");
  ASSERT_TRUE(code.ok() && *code == 0) << code.status() << dom;
  // The members table: the scheduler, both servers, both workers.
  EXPECT_EQ(Count(dom, "<tr[^>]*data-role=\"scheduler\""), 1) << dom;
  EXPECT_EQ(Count(dom, "<tr[^>]*data-role=\"server\""), 2) << dom;
  EXPECT_EQ(Count(dom, "<tr[^>]*data-role=\"worker\""), 2) << dom;
  // The sparse tables' card: a line per server for table "words".
  EXPECT_EQ(Count(dom, "<tr[^>]*data-table=\"words\""), 2) << dom;
  // The loss curve has points, not just a frame.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(dom, m, std::regex("id=\"loss\"[^>]*data-points=\"([0-9]+)\"")))
      << dom;
  EXPECT_GE(std::stoi(m[1]), 2) << dom;
  // Only measured points: the first loss and rate drawn are real ones, not
  // the zeros a worker reports before its first loss and progress window.
  for (const char* chart : {"loss", "throughput"}) {
    ASSERT_TRUE(std::regex_search(
        dom, m, std::regex(absl::StrCat("id=\"", chart, "\"[^>]*data-first=\"([-0-9.e+]+)\""))))
        << chart << dom;
    EXPECT_GT(std::stod(m[1]), 0) << chart;
  }
  EXPECT_EQ(dom.find("HTTP 4"), std::string::npos) << dom;  // /api/status answered

  std::vector<std::string> shot = chromium;
  const std::string png = out_dir + "/dashboard.png";
  shot.insert(shot.end(), {"--screenshot=" + png, url});
  std::string log;
  code = RunCommand(shot, &log, absl::Seconds(60), "chromium");
  ASSERT_TRUE(code.ok() && *code == 0) << code.status() << log;
  EXPECT_GT(ReadFile(png).size(), 10000u) << log;
}

TEST_F(OperateTest, WatchPrintsTheStatusAndPlotDrawsTheRunsCurves) {
  std::string out;
  absl::StatusOr<int> code = RunCommand(
      {BinaryPath("tools/psctl"), "watch", "--scheduler=" + cluster_.scheduler_address(),
       "--count=2", "--interval_ms=300", "--json"},
      &out, absl::Seconds(30), "psctl");
  ASSERT_TRUE(code.ok() && *code == 0) << out;
  EXPECT_EQ(Count(out, "\"job_state\": \"RUNNING_JOB\""), 2) << out;
  code = RunCommand({BinaryPath("tools/psctl"), "watch", "--scheduler=" + cluster_.scheduler_address(),
                     "--count=1"},
                    &out, absl::Seconds(30), "psctl");
  ASSERT_TRUE(code.ok() && *code == 0) << out;
  EXPECT_NE(out.find("% "), std::string::npos) << out;  // the progress bar
  EXPECT_NE(out.find("of 4000"), std::string::npos) << out;

  absl::SleepFor(absl::Seconds(1));  // a few points in curves.jsonl
  for (const std::string ext : {".png", ".svg"}) {
    const std::string file = cluster_.dir() + "/curves" + ext;
    code = RunCommand({BinaryPath("tools/psctl"), "plot", "--run_dir=" + cluster_.dir() + "/run",
                       "--out=" + file},
                      &out, absl::Seconds(60), "psctl");
    ASSERT_TRUE(code.ok() && *code == 0) << out;
    EXPECT_GT(ReadFile(file).size(), 5000u) << out;
  }
}

// Early in a job no evaluation has run yet (accuracy -1 at every point):
// the panel is drawn empty, the plot does not fail (a regression test: gnuplot
// refuses a series with no defined point).
TEST(PlotTest, ARunWithoutEvaluationsYetIsDrawn) {
  const std::string dir = NewTempDir("plot_no_eval");
  std::string lines;
  for (int c = 1; c <= 5; ++c) {
    absl::StrAppend(&lines, "{\"clock\":\"", c, "\",\"loss\":", 2.0 / c,
                    ",\"testAccuracy\":-1,\"validationLoss\":-1,\"samplesPerS\":1000,",
                    "\"workerClocks\":[\"", c, "\",\"", c + 1, "\"]}\n");
  }
  WriteFile(dir + "/curves.jsonl", lines);
  for (const std::string ext : {".png", ".svg"}) {
    const std::string file = dir + "/curves" + ext;
    std::string out;
    absl::StatusOr<int> code = RunCommand(
        {BinaryPath("tools/psctl"), "plot", "--run_dir=" + dir, "--out=" + file}, &out,
        absl::Seconds(60), "psctl");
    ASSERT_TRUE(code.ok() && *code == 0) << out;
    EXPECT_GT(ReadFile(file).size(), 5000u) << out;
  }
}

}  // namespace
}  // namespace testing
}  // namespace pstrain
