#include "common/metrics.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "common/http_server.h"
#include "common/refused.h"
#include "common/security.h"
#include "gtest/gtest.h"
#include "tests/prometheus_parser.h"

namespace pstrain {
namespace {

MemberStatus Worker() {
  MemberStatus s;
  s.set_role(WORKER);
  s.set_id(3);
  s.set_clock(17);
  s.set_pushes(34);
  s.set_pulls(35);
  s.set_bytes_in(1000);
  s.mutable_worker()->set_loss(0.5);
  s.mutable_worker()->set_test_accuracy(-1);
  s.mutable_worker()->set_gate_ms(2);
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

TEST(MetricsTest, AServersTablesAreLabelledByName) {
  MemberStatus s;
  s.set_role(SERVER);
  s.set_id(1);
  (*s.mutable_server()->mutable_refused())[kRefusedRows] = 5;
  (*s.mutable_server()->mutable_refused())[kRefusedShm] = 2;
  for (const char* name : {"words", "tags"}) {
    TableStatus* t = s.mutable_server()->add_tables();
    t->set_name(name);
    t->set_rows(name[0] == 'w' ? 1000 : 7);
    t->set_bytes(64000);
    t->set_updates(12);
  }
  PrometheusText out;
  WriteDaemonMetrics(s, Latencies(), &out);
  auto families = ParsePrometheusText(out.text());
  ASSERT_TRUE(families.ok()) << families.status() << "\n" << out.text();
  EXPECT_EQ(*PromValue(*families, "pstrain_table_rows", {{"table", "words"}, {"id", "1"}}), 1000);
  EXPECT_EQ(*PromValue(*families, "pstrain_table_rows", {{"table", "tags"}}), 7);
  EXPECT_EQ(families->at("pstrain_table_updates_total").type, "counter");
  EXPECT_EQ(*PromValue(*families, "pstrain_table_updates_total", {{"table", "tags"}}), 12);
  // One family of refusals, a sample per word (0 for one the status lacks).
  EXPECT_EQ(families->at("pstrain_requests_refused_total").type, "counter");
  EXPECT_EQ(*PromValue(*families, "pstrain_requests_refused_total", {{"what", "rows"}}), 5);
  EXPECT_EQ(*PromValue(*families, "pstrain_requests_refused_total", {{"what", "shm"}}), 2);
  EXPECT_EQ(*PromValue(*families, "pstrain_requests_refused_total", {{"what", "chunks"}}), 0);
}

TEST(MetricsTest, ClusterMetricsCountLiveMembersAndTheClockSpread) {
  ClusterStatus st;
  st.set_job_state(RUNNING_JOB);
  st.set_consistency(SSP);
  st.set_staleness(3);
  st.set_deaths(2);
  st.add_rollbacks();
  for (int i = 0; i < 3; ++i) {
    MemberStatus* w = st.add_members();
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

TEST(MetricsTest, ThePlacementAndItsMovesShowWhatEachServerHoldsAndTheMoveUnderWay) {
  ClusterStatus st;
  PlacementStatus* p = st.mutable_placement();
  p->set_version(2);
  for (int s : {0, 2}) {
    PlacedServer* ps = p->add_servers();
    ps->set_server(s);
    ps->set_chunks(7 + s);
    ps->set_chunk_bytes(1000 * (s + 1));
    ps->set_row_buckets(512);
  }
  p->mutable_move()->set_switch_clock(52);
  p->mutable_move()->set_bytes(4096);
  p->mutable_move()->set_bytes_moved(1024);
  p->mutable_move()->set_bytes_left(3072);
  p->mutable_move()->add_waiting_for(2);
  MoveRecord* done = p->add_history();
  done->set_bytes(5120);
  p->add_history()->set_abandoned("server 2 was lost");
  PrometheusText out;
  WriteClusterMetrics(st, &out);
  auto families = ParsePrometheusText(out.text());
  ASSERT_TRUE(families.ok()) << families.status();
  EXPECT_EQ(*PromValue(*families, "pstrain_placement_version", {}), 2);
  EXPECT_EQ(*PromValue(*families, "pstrain_placement_chunks", {{"server", "2"}}), 9);
  EXPECT_EQ(*PromValue(*families, "pstrain_placement_chunk_bytes", {{"server", "0"}}), 1000);
  EXPECT_EQ(*PromValue(*families, "pstrain_placement_row_buckets", {{"server", "2"}}), 512);
  EXPECT_EQ(*PromValue(*families, "pstrain_move_under_way", {}), 1);
  EXPECT_EQ(*PromValue(*families, "pstrain_move_switch_clock", {}), 52);
  EXPECT_EQ(*PromValue(*families, "pstrain_move_bytes_left", {}), 3072);
  EXPECT_EQ(*PromValue(*families, "pstrain_move_waiting_servers", {}), 1);
  EXPECT_EQ(*PromValue(*families, "pstrain_moves_total", {{"outcome", "switched"}}), 1);
  EXPECT_EQ(*PromValue(*families, "pstrain_moves_total", {{"outcome", "abandoned"}}), 1);
  EXPECT_EQ(*PromValue(*families, "pstrain_moved_bytes_total", {}), 5120);
}

TEST(MetricsTest, StandbyCopiesShowWhoServesWhatAndTheLag) {
  ClusterStatus st;
  st.set_promotions(1);
  for (int serving : {0, 0}) st.mutable_routes()->add_serving(serving);
  PrometheusText cluster;
  WriteClusterMetrics(st, &cluster);
  auto families = ParsePrometheusText(cluster.text());
  ASSERT_TRUE(families.ok()) << families.status();
  EXPECT_EQ(*PromValue(*families, "pstrain_promotions_total", {}), 1);
  EXPECT_EQ(*PromValue(*families, "pstrain_serving_server", {{"home", "1"}}), 0);
  MemberStatus server;
  server.set_role(SERVER);
  server.mutable_server()->mutable_standby()->add_serving(0);
  server.mutable_server()->mutable_standby()->add_serving(1);
  server.mutable_server()->mutable_standby()->set_replication_lag(3);
  server.mutable_server()->mutable_standby()->set_replicated_bytes(4096);
  PrometheusText member;
  WriteDaemonMetrics(server, Latencies(), &member);
  families = ParsePrometheusText(member.text());
  ASSERT_TRUE(families.ok()) << families.status();
  EXPECT_EQ(*PromValue(*families, "pstrain_replication_lag", {}), 3);
  EXPECT_EQ(*PromValue(*families, "pstrain_replicated_bytes_total", {}), 4096);
  EXPECT_EQ(*PromValue(*families, "pstrain_standby_ready", {}), 0);
}

TEST(MetricsTest, LabelValuesAreEscaped) {
  PrometheusText out;
  out.Gauge("pstrain_x", "a \\ help\nline", {{"l", "a\"b\\c\nd"}}, 1);
  auto families = ParsePrometheusText(out.text());
  ASSERT_TRUE(families.ok()) << families.status() << "\n" << out.text();
  EXPECT_EQ(families->at("pstrain_x").samples[0].labels.at("l"), "a\\\"b\\\\c\\nd");
}

TEST(MetricsTest, TheParserRefusesBrokenText) {
  EXPECT_FALSE(ParsePrometheusText("x 1\n").ok());                         // no TYPE
  EXPECT_FALSE(ParsePrometheusText("# TYPE x counter\nx -1\n").ok());      // negative counter
  EXPECT_FALSE(ParsePrometheusText("# TYPE x gauge\nx{a=\"1} 1\n").ok());  // bad label
  EXPECT_FALSE(ParsePrometheusText("# TYPE x gauge\nx one\n").ok());       // bad value
  EXPECT_FALSE(ParsePrometheusText("# TYPE x histogram\nx_bucket{le=\"1\"} 2\n"
                                   "x_bucket{le=\"+Inf\"} 1\nx_count 1\nx_sum 0\n")
                   .ok());  // not cumulative
}

TEST(HttpServerTest, ServesItsPathsAndRefusesOthers) {
  auto server =
      HttpServer::Start("127.0.0.1", 0, {{"/metrics", [] {
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

TEST(HttpServerTest, RequestDeadlinesExpireOnceAndNotWhileAnswering) {
  RequestDeadlines deadlines(absl::Seconds(10));
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  int a = 0, b = 0, c = 0;  // three connections
  deadlines.Started(&a, 5, t0);
  deadlines.Started(&b, 6, t0);
  deadlines.Started(&c, 7, t0);
  deadlines.Busy(&b);                             // being answered: no deadline
  deadlines.Answered(&c, t0 + absl::Seconds(8));  // the next request's starts
  std::vector<int> closed;
  auto expire = [&](absl::Duration at) {
    closed.clear();
    deadlines.Expire(t0 + at, [&](int fd) { closed.push_back(fd); });
    return closed;
  };
  EXPECT_EQ(expire(absl::Seconds(9)), std::vector<int>{});
  EXPECT_EQ(expire(absl::Seconds(10)), std::vector<int>{5});
  EXPECT_EQ(expire(absl::Seconds(11)), std::vector<int>{});  // once
  EXPECT_EQ(expire(absl::Seconds(18)), std::vector<int>{7});
  deadlines.Closed(&b);
  deadlines.Answered(&b, t0);  // after its close: nothing
  EXPECT_EQ(expire(absl::Seconds(100)), std::vector<int>{});
}

// A connection that trickles a byte every 100 ms is closed at its request
// deadline; a normal request is answered meanwhile.
TEST(HttpServerTest, ATricklingConnectionIsClosedAtItsDeadline) {
  HttpLimits limits;
  limits.request_deadline = absl::Seconds(1);
  auto server = HttpServer::Start("127.0.0.1", 0,
                                  {{"/metrics",
                                    [] {
                                      return HttpResponse{200, "text/plain", "ok\n"};
                                    }}},
                                  limits);
  ASSERT_TRUE(server.ok()) << server.status();
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>((*server)->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const std::string start = "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ";
  ASSERT_EQ(send(fd, start.data(), start.size(), MSG_NOSIGNAL), static_cast<ssize_t>(start.size()));
  const absl::Time t0 = absl::Now();
  bool open = true;
  while (open && absl::Now() - t0 < absl::Seconds(5)) {
    absl::SleepFor(absl::Milliseconds(100));
    char byte;
    open = send(fd, "a", 1, MSG_NOSIGNAL) == 1 && recv(fd, &byte, 1, MSG_DONTWAIT) < 0 &&
           errno == EAGAIN;
  }
  const absl::Duration held = absl::Now() - t0;
  close(fd);
  EXPECT_FALSE(open);
  EXPECT_GE(held, absl::Milliseconds(900));
  EXPECT_LE(held, absl::Seconds(3));
  auto reply = HttpGet("127.0.0.1:" + std::to_string((*server)->port()), "/metrics");
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->code, 200);
}

// Last: it makes a token the process' for good.
TEST(HttpServerTest, WithATokenOnlyRequestsCarryingItAreAnswered) {
  const std::string file = ::testing::TempDir() + "/token";
  std::ofstream(file) << "s3cret\n";
  SecurityFiles files;
  files.auth_token_file = file;
  ASSERT_TRUE(ConfigureSecurity(files).ok());
  auto server =
      HttpServer::Start("127.0.0.1", 0, {{"/metrics", [] {
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
