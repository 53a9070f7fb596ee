// Sparse tables served by real daemons on loopback (JobSpec.tables,
// ParameterServer.PullRows/PushRows): a job with a table, 2 servers and a
// training worker; the test pulls and pushes rows by id through
// worker/row_client.h while the job runs. The rows come back bit for bit as
// one in-process SparseTable makes and updates them, each server holds
// only its ids, and every bad request is refused with its status, counted
// in the server's Status, with nothing made or applied.
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/rpc.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "server/sparse_table.h"
#include "server/sparse_tables.h"
#include "tests/cluster.h"
#include "tests/test_jobs.h"
#include "tests/wait.h"
#include "worker/row_client.h"

namespace pstrain {
namespace testing {
namespace {

constexpr char kTable[] = R"pb(
  tables {
    name: "words"
    width: 8
    num_ids: 100000
    optimizer { type: ADAM learning_rate: 0.05 }
  }
)pb";

// The job as the daemons run it (defaults applied).
JobSpec TheJob(const std::string& text) {
  absl::StatusOr<JobSpec> job = ParseJobSpecText(text, "job");
  EXPECT_TRUE(job.ok()) << job.status();
  ApplyJobDefaults(&*job);
  EXPECT_TRUE(ValidateJobSpec(*job).ok());
  return *job;
}

MemberStatus ServerStatus(const std::string& address) {
  auto stub = ParameterServer::NewStub(MakeChannel(address));
  MemberStatus st;
  (void)stub->Status(ContextWithTimeout(absl::Seconds(5)).get(), StatusRequest(), &st);
  return st;
}

class SparseRowsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    job_text_ = SixteenClassJob(absl::StrCat("clocks: 100000\nseed: 11\n", kTable));
    ClusterOptions options;
    options.job_text = job_text_;
    options.servers = 2;
    options.workers = 1;
    options.worker_flags = {{"--debug_slowdown_ms=5"}};
    ASSERT_TRUE(cluster_.Start(options).ok()) << cluster_.Logs();
    // Once the worker trains, both servers serve the job (and its tables).
    ASSERT_TRUE(WaitForStatus(
        cluster_.scheduler_address(),
        [](const ClusterStatus& st) { return SlowestClock(st) >= 2; }, absl::Seconds(60)))
        << cluster_.Logs();
    absl::StatusOr<ClusterStatus> st = SchedulerStatus(cluster_.scheduler_address());
    ASSERT_TRUE(st.ok());
    for (int id = 0; id < 2; ++id) servers_.push_back(MemberOf(*st, SERVER, id).address());
  }

  Cluster cluster_{"sparse_rows"};
  std::string job_text_;
  std::vector<std::string> servers_;  // by id
};

TEST_F(SparseRowsTest, RowsComeBackAsOneTableMakesAndUpdatesThem) {
  const JobSpec job = TheJob(job_text_);
  RowClient client(job, servers_, /*worker_id=*/0);
  SparseTable reference(TableConfig{"words", 8, job.tables(0).init_scale(), job.seed(),
                                    RowOptimizerOf(job.tables(0).optimizer())});
  // A batch's ids: repeats, neighbours and far ids.
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < 300; ++i) ids.push_back((i * i * 7919) % 100000);
  ids.push_back(ids[3]);
  std::vector<float> rows, expected(ids.size() * 8);
  ASSERT_TRUE(client.Pull("words", ids, &rows).ok()) << cluster_.Logs();
  reference.Pull(ids, expected.data());
  ASSERT_EQ(rows.size(), expected.size());
  EXPECT_EQ(std::memcmp(rows.data(), expected.data(), rows.size() * 4), 0);

  // Three updates with repeated ids (each row's gradients summed, then
  // applied), and a fourth of server 0's rows only: Adam's step counts the
  // table's updates, so server 1 must count it too.
  std::vector<uint64_t> server0_ids;
  for (uint64_t id : ids) {
    if (ServerOfRow(id, 2) == 0 && server0_ids.size() < 20) server0_ids.push_back(id);
  }
  for (int clock = 0; clock < 4; ++clock) {
    std::vector<uint64_t> batch =
        clock == 3 ? server0_ids
                   : std::vector<uint64_t>(ids.begin() + clock * 50, ids.begin() + clock * 50 + 80);
    batch.push_back(batch[0]);
    std::vector<float> grads(batch.size() * 8);
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = std::sin(clock * 3.0f + i);
    const absl::Status sent = client.Push("words", clock, batch, grads);
    ASSERT_TRUE(sent.ok()) << sent;
    std::vector<uint64_t> distinct;
    std::vector<float> summed;
    CoalesceRows(batch, grads, 8, &distinct, &summed);
    const absl::Status pushed = reference.Push(distinct, summed);
    ASSERT_TRUE(pushed.ok()) << pushed;
  }
  ASSERT_TRUE(client.Pull("words", ids, &rows).ok());
  reference.Pull(ids, expected.data());
  EXPECT_EQ(std::memcmp(rows.data(), expected.data(), rows.size() * 4), 0);

  // Each server holds only its ids; together, every distinct id once.
  int64_t held = 0;
  for (int s = 0; s < 2; ++s) {
    const MemberStatus st = ServerStatus(servers_[s]);
    ASSERT_EQ(st.tables_size(), 1);
    EXPECT_EQ(st.tables(0).name(), "words");
    EXPECT_GT(st.tables(0).rows(), 0);
    EXPECT_EQ(st.tables(0).updates(), 4);  // each push reached both servers
    EXPECT_EQ(st.tables(0).refused(), 0);
    held += st.tables(0).rows();
  }
  EXPECT_EQ(held, reference.num_rows());
  // The scheduler's Status (psctl status) carries each server's tables too.
  EXPECT_TRUE(WaitForStatus(
      cluster_.scheduler_address(),
      [](const ClusterStatus& st) {
        for (int id = 0; id < 2; ++id) {
          const MemberStatus m = MemberOf(st, SERVER, id);
          if (m.tables_size() != 1 || m.tables(0).updates() != 4) return false;
        }
        return true;
      },
      absl::Seconds(30)));
}

TEST_F(SparseRowsTest, BadRowRequestsAreRefusedCountedAndChangeNothing) {
  const JobSpec job = TheJob(job_text_);
  RowClient client(job, servers_, 0);
  // Two ids of server 0 (pulled), one not pulled, one of server 1.
  std::vector<uint64_t> mine, theirs;
  for (uint64_t id = 0; mine.size() < 3 || theirs.empty(); ++id) {
    (ServerOfRow(id, 2) == 0 ? mine : theirs).push_back(id);
  }
  std::vector<float> before;
  ASSERT_TRUE(client.Pull("words", {mine[0], mine[1]}, &before).ok()) << cluster_.Logs();
  auto stub = ParameterServer::NewStub(MakeChannel(servers_[0]));
  auto pull = [&](const std::string& table, std::vector<uint64_t> ids) {
    PullRowsRequest req;
    req.set_table(table);
    for (uint64_t id : ids) req.add_ids(id);
    PullRowsResponse reply;
    return stub->PullRows(ContextWithTimeout(absl::Seconds(10)).get(), req, &reply).error_code();
  };
  auto push = [&](const std::string& table, std::vector<uint64_t> ids, size_t floats) {
    PushRowsRequest req;
    req.set_table(table);
    for (uint64_t id : ids) req.add_ids(id);
    req.set_grads(std::string(floats * 4, '\0'));
    PushRowsResponse reply;
    return stub->PushRows(ContextWithTimeout(absl::Seconds(10)).get(), req, &reply).error_code();
  };
  uint64_t beyond = 100000;
  while (ServerOfRow(beyond, 2) != 0) ++beyond;
  EXPECT_EQ(pull("nouns", {mine[0]}), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(pull("words", {mine[2], beyond}), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_EQ(pull("words", {mine[2], theirs[0]}), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(push("nouns", {mine[0]}, 8), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(push("words", {mine[0]}, 7), grpc::StatusCode::INVALID_ARGUMENT);  // wrong width
  EXPECT_EQ(push("words", {mine[0], mine[2]}, 16), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(push("words", {beyond}, 8), grpc::StatusCode::OUT_OF_RANGE);
  // A worker the job does not have (its only one is 0).
  PullRowsRequest stranger;
  stranger.set_worker_id(5);
  stranger.set_table("words");
  stranger.add_ids(mine[0]);
  PullRowsResponse rows;
  EXPECT_EQ(stub->PullRows(ContextWithTimeout(absl::Seconds(10)).get(), stranger, &rows)
                .error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  const MemberStatus st = ServerStatus(servers_[0]);
  ASSERT_EQ(st.tables_size(), 1);
  EXPECT_EQ(st.tables(0).rows(), 2);  // no refused pull made a row
  EXPECT_EQ(st.tables(0).updates(), 0);
  EXPECT_EQ(st.tables(0).refused(), 5);
  EXPECT_EQ(st.row_requests_refused(), 8);  // those naming "nouns" or worker 5 too
  std::vector<float> after;
  ASSERT_TRUE(client.Pull("words", {mine[0], mine[1]}, &after).ok());
  EXPECT_EQ(after, before);
  // The client refuses a table the job does not declare before any call.
  EXPECT_EQ(client.Pull("nouns", {mine[0]}, &after).code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace testing
}  // namespace pstrain
