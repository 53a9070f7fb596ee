#include "common/metrics.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "common/http_server.h"
#include "common/security.h"
#include "gtest/gtest.h"
#include "tests/prometheus_parser.h"

namespace pstrain {
namespace {

NodeStatus Worker() {
  NodeStatus s;
  s.set_role(WORKER);
  s.set_id(3);
  s.set_clock(17);
  s.set_pushes(34);
  s.set_pulls(35);
  s.set_bytes_in(1000);
  s.set_loss(0.5);
  s.set_test_accuracy(-1);
  s.set_gate_ms(2);
  return s;
}

TEST(MetricsTest, EveryLineParsesAndValuesAreTheStatusFields) {
  Latencies latencies;
  latencies.push.Observe(absl::Microseconds(50));
  latencies.push.Observe(absl::Milliseconds(3));
  latencies.push.Observe(absl::Seconds(100));
  PrometheusText out;
  WriteDaemonMetrics(Worker(), latencies, &out);
  auto families = ParsePrometheusText(out.text());
  ASSERT_TRUE(families.ok()) << families.status() << "\n" << out.text();
  EXPECT_EQ(families->at("pstrain_pushes_total").type, "counter");
  EXPECT_EQ(*PromValue(*families, "pstrain_pushes_total", {{"role", "worker"}, {"id", "3"}}), 34);
  EXPECT_EQ(*PromValue(*families, "pstrain_clock", {{"role", "worker"}}), 17);
  EXPECT_EQ(*PromValue(*families, "pstrain_clock_phase_seconds", {{"phase", "gate"}}), 0.002);
  // No accuracy before the first evaluation.
  EXPECT_EQ(families->count("pstrain_test_accuracy"), 0u);
  // The histogram: cumulative buckets, the +Inf bucket is the count.
  EXPECT_EQ(*PromValue(*families, "pstrain_push_duration_seconds_bucket", {{"le", "0.0001"}}), 1);
  EXPECT_EQ(*PromValue(*families, "pstrain_push_duration_seconds_bucket", {{"le", "0.005"}}), 2);
  EXPECT_EQ(*PromValue(*families, "pstrain_push_duration_seconds_bucket", {{"le", "+Inf"}}), 3);
  EXPECT_EQ(*PromValue(*families, "pstrain_push_duration_seconds_count", {}), 3);
  EXPECT_NEAR(*PromValue(*families, "pstrain_push_duration_seconds_sum", {}), 100.00305, 1e-9);
}

TEST(MetricsTest, ClusterMetricsCountLiveMembersAndTheClockSpread) {
  ClusterStatus st;
  st.set_job_state(RUNNING_JOB);
  st.set_consistency(SSP);
  st.set_staleness(3);
  st.set_deaths(2);
  st.add_rollbacks();
  for (int i = 0; i < 3; ++i) {
    NodeStatus* w = st.add_members();
    w->set_role(WORKER);
    w->set_id(i);
    w->set_state(i == 2 ? DEAD : RUNNING);
    w->set_clock(10 + i);
    st.add_worker_clocks(i == 2 ? -1 : 10 + i);
  }
  PrometheusText out;
  WriteClusterMetrics(st, &out);
  auto families = ParsePrometheusText(out.text());
  ASSERT_TRUE(families.ok()) << families.status();
  EXPECT_EQ(*PromValue(*families, "pstrain_staleness", {}), 3);
  EXPECT_EQ(*PromValue(*families, "pstrain_deaths_total", {}), 2);
  EXPECT_EQ(*PromValue(*families, "pstrain_rollbacks_total", {}), 1);
  EXPECT_EQ(*PromValue(*families, "pstrain_live_members", {{"member_role", "worker"}}), 2);
  EXPECT_EQ(*PromValue(*families, "pstrain_slowest_worker_clock", {}), 10);
  EXPECT_EQ(*PromValue(*families, "pstrain_fastest_worker_clock", {}), 11);
}

TEST(MetricsTest, LabelValuesAreEscaped) {
  PrometheusText out;
  out.Gauge("pstrain_x", "a \\ help\nline", {{"l", "a\"b\\c\nd"}}, 1);
  auto families = ParsePrometheusText(out.text());
  ASSERT_TRUE(families.ok()) << families.status() << "\n" << out.text();
  EXPECT_EQ(families->at("pstrain_x").samples[0].labels.at("l"), "a\\\"b\\\\c\\nd");
}

TEST(MetricsTest, TheParserRefusesBrokenText) {
  EXPECT_FALSE(ParsePrometheusText("x 1\n").ok());                          // no TYPE
  EXPECT_FALSE(ParsePrometheusText("# TYPE x counter\nx -1\n").ok());       // negative counter
  EXPECT_FALSE(ParsePrometheusText("# TYPE x gauge\nx{a=\"1} 1\n").ok());   // bad label
  EXPECT_FALSE(ParsePrometheusText("# TYPE x gauge\nx one\n").ok());        // bad value
  EXPECT_FALSE(ParsePrometheusText("# TYPE x histogram\nx_bucket{le=\"1\"} 2\n"
                                   "x_bucket{le=\"+Inf\"} 1\nx_count 1\nx_sum 0\n")
                   .ok());  // not cumulative
}

TEST(HttpServerTest, ServesItsPathsAndRefusesOthers) {
  auto server = HttpServer::Start("127.0.0.1", 0, {{"/metrics", [] {
                                                      return HttpResponse{200, "text/plain", "ok\n"};
                                                    }}});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = "127.0.0.1:" + std::to_string((*server)->port());
  auto reply = HttpGet(address, "/metrics");
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->code, 200);
  EXPECT_EQ(reply->body, "ok\n");
  EXPECT_EQ(HttpGet(address, "/nothing")->code, 404);
  // A port in use: a clear error, not a crash.
  EXPECT_FALSE(HttpServer::Start("127.0.0.1", (*server)->port(), {}).ok());
  EXPECT_FALSE(HttpServer::Start("127.0.0.1", 70000, {}).ok());
}

TEST(HttpServerTest, ConnectionLimitLeavesDescriptorsForTheDaemon) {
  EXPECT_EQ(HttpConnectionLimit(0), 1024);  // unlimited
  EXPECT_EQ(HttpConnectionLimit(1 << 20), 1024);
  EXPECT_EQ(HttpConnectionLimit(4096), 1024);
  EXPECT_EQ(HttpConnectionLimit(1024), 256);  // 512 kept, half the rest
  EXPECT_EQ(HttpConnectionLimit(512), 16);
  EXPECT_EQ(HttpConnectionLimit(64), 16);
}

// Last: it makes a token the process' for good.
TEST(HttpServerTest, WithATokenOnlyRequestsCarryingItAreAnswered) {
  const std::string file = ::testing::TempDir() + "/token";
  std::ofstream(file) << "s3cret\n";
  SecurityFiles files;
  files.auth_token_file = file;
  ASSERT_TRUE(ConfigureSecurity(files).ok());
  auto server = HttpServer::Start("127.0.0.1", 0, {{"/metrics", [] {
                                                      return HttpResponse{200, "text/plain", "ok\n"};
                                                    }}});
  ASSERT_TRUE(server.ok());
  const std::string address = "127.0.0.1:" + std::to_string((*server)->port());
  EXPECT_EQ(HttpGet(address, "/metrics")->code, 401);
  EXPECT_EQ(HttpGet(address, "/metrics", {"Authorization: Bearer wrong"})->code, 401);
  EXPECT_EQ(HttpGet(address, "/metrics?token=wrong")->code, 401);
  EXPECT_EQ(HttpGet(address, "/metrics", {"Authorization: Bearer s3cret"})->code, 200);
  EXPECT_EQ(HttpGet(address, "/metrics?token=s3cret")->code, 200);
}

}  // namespace
}  // namespace pstrain
