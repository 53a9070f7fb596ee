// Bad input gets a clear error with the right exit code or gRPC status, and
// nothing crashes or hangs.
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/rpc.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "proto/cluster.grpc.pb.h"
#include "proto/ps.grpc.pb.h"
#include "tests/cluster.h"
#include "tests/test_jobs.h"

namespace pstrain {
namespace testing {
namespace {

int RunScheduler(const std::string& job_path, std::string* output) {
  return RunCommand(
             {BinaryPath("scheduler/ps_scheduler"), "--job=" + job_path, "--listen=127.0.0.1:0"},
             output, absl::Seconds(20), "sched")
      .value_or(-1);
}

TEST(BadInputTest, MissingJobFileNamesTheFile) {
  std::string out;
  EXPECT_EQ(RunScheduler("/nonexistent/job.pbtxt", &out), 2);
  EXPECT_TRUE(absl::StrContains(out, "/nonexistent/job.pbtxt: cannot open")) << out;
}

TEST(BadInputTest, GarbledJobFileNamesFileAndLine) {
  const std::string path = NewTempDir("garbled") + "/job.pbtxt";
  WriteFile(path, "name: \"x\"\nbatch_size: 32\nclocks: many\n");
  std::string out;
  EXPECT_EQ(RunScheduler(path, &out), 2);
  EXPECT_TRUE(absl::StrContains(out, path + ":3:")) << out;

  WriteFile(path, "name: \"x\"\nno_such_field: 1\n");
  EXPECT_EQ(RunScheduler(path, &out), 2);
  EXPECT_TRUE(absl::StrContains(out, path + ":2:")) << out;
  EXPECT_TRUE(absl::StrContains(out, "no_such_field")) << out;
}

TEST(BadInputTest, InconsistentJobSpecIsRefused) {
  const std::string path = NewTempDir("inconsistent") + "/job.pbtxt";
  WriteFile(path, SmallJob("batch_size: 1\nnum_workers: 4\n"));
  std::string out;
  EXPECT_EQ(RunScheduler(path, &out), 2);
  EXPECT_TRUE(absl::StrContains(out, "batch_size (1) must be at least num_workers (4)")) << out;
}

// Plausible typos in sizes: refused by the scheduler (exit 2) naming the
// field, before any worker tries to allocate them.
TEST(BadInputTest, SizesNoWorkerCanAllocateAreExitTwoNamingTheField) {
  const std::string path = NewTempDir("sizes") + "/job.pbtxt";
  const std::string gpt =
      "model { kind: GPT gpt { layers: 1 heads: 2 width: 32 context: 16 } }\n"
      "data { dataset: TEXT }\nclocks: 5\n";
  const std::string mlp =
      "model { layers { type: DENSE units: 4 } layers { type: SOFTMAX_XENT } }\n"
      "data { dataset: SYNTHETIC synthetic_dim: 32 synthetic_classes: 4 "
      "synthetic_train_size: 2000000000 }\nclocks: 5\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {gpt + "batch_size: 2000000000", "batch_size (2000000000)"},
      {mlp + "batch_size: 32", "synthetic_train_size (2000000000)"},
      {mlp + "batch_size: 2000000000", "synthetic_train_size (2000000000)"},
  };
  for (const auto& [job, field] : cases) {
    WriteFile(path, job);
    std::string out;
    EXPECT_EQ(RunScheduler(path, &out), 2) << job << "\n" << out;
    EXPECT_TRUE(absl::StrContains(out, field)) << job << "\n" << out;
  }
}

// Sparse tables past their limits: more tables than a job may declare
// (each costs every server its part: the 1,000 with admission made
// a server allocate 4 GB), ids beyond int64, budgets that cannot hold the
// table's admission filter and a row, or a typo's budget. Exit 2 naming
// the field, before any server allocates anything.
TEST(BadInputTest, TablesPastTheirLimitsAreExitTwoNamingTheField) {
  const std::string path = NewTempDir("tables") + "/job.pbtxt";
  auto table = [](int i, const std::string& extra) {
    return absl::StrCat("tables { name: \"t", i, "\" width: 64 ", extra, " }\n");
  };
  std::string many;
  for (int i = 0; i < 1000; ++i) many += table(i, "admit_after: 2");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {many, "tables (1000) are more than the 256"},
      {table(0, "num_ids: 18446744073709551615"), "num_ids (18446744073709551615)"},
      {table(0, "admit_after: 2 memory_budget_bytes: 1048576"), "memory_budget_bytes (1048576)"},
      {table(0, "memory_budget_bytes: 100"), "memory_budget_bytes (100)"},
      {table(0, "memory_budget_bytes: 2000000000000000"), "memory_budget_bytes (2000000000000000)"},
  };
  for (const auto& [tables, field] : cases) {
    WriteFile(path, SmallJob("batch_size: 16\nclocks: 5\n" + tables));
    std::string out;
    EXPECT_EQ(RunScheduler(path, &out), 2) << field << "\n" << out.substr(0, 2000);
    EXPECT_TRUE(absl::StrContains(out, field)) << field << "\n" << out.substr(0, 2000);
  }
}

// A data set the spec allows (26 GB) that the worker cannot allocate (its
// address space is held to 4 GB): exit 1, "out of memory", not a signal;
// the job is aborted with the worker's reason.
TEST(BadInputTest, AnAllocationThatFailsIsOutOfMemoryNotASignal) {
  Cluster cluster("oom");
  ClusterOptions options;
  options.job_text =
      "model { layers { type: DENSE units: 4 } layers { type: SOFTMAX_XENT } }\n"
      "data { dataset: SYNTHETIC synthetic_dim: 32 synthetic_classes: 4 "
      "synthetic_train_size: 200000000 }\nbatch_size: 32\nclocks: 5\n";
  options.worker_prefix = {{"/usr/bin/prlimit", "--as=4000000000", "--"}};
  options.worker_flags = {{"--device=cpu"}};  // a CUDA context wants more address space
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.Logs();
  absl::StatusOr<int> code = cluster.WaitAll(absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << code.status() << cluster.Logs();
  EXPECT_EQ(cluster.workers()[0].Wait(absl::ZeroDuration()).value_or(-1), 1) << cluster.Logs();
  EXPECT_TRUE(absl::StrContains(cluster.workers()[0].Log(), "out of memory")) << cluster.Logs();
  absl::StatusOr<ClusterStatus> final_status = cluster.FinalStatus();
  ASSERT_TRUE(final_status.ok()) << final_status.status();
  EXPECT_EQ(final_status->job_state(), ABORTED);
  EXPECT_TRUE(absl::StrContains(MemberOf(*final_status, WORKER, 0).message(), "out of memory"))
      << MemberOf(*final_status, WORKER, 0).message();
}

TEST(BadInputTest, MissingDataPathFailsTheJobCleanly) {
  Cluster cluster("nodata");
  ClusterOptions options;
  options.job_text = "data { dataset: FASHION_MNIST path: \"/nonexistent/fashion\" }\nclocks: 10\n";
  options.servers = 1;
  options.workers = 1;
  ASSERT_TRUE(cluster.Start(options).ok());
  absl::StatusOr<int> code = cluster.WaitAll(absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << code.status() << cluster.Logs();
  EXPECT_EQ(*code, 1) << cluster.Logs();
  EXPECT_EQ(cluster.workers()[0].Wait(absl::ZeroDuration()).value_or(-1), 1);
  // The server exits 1 (job aborted), or 3 when the worker failed before the
  // server registered and the scheduler refused it ("the job has already
  // ended"). Either way: a clear reason, a non-zero exit, no hang.
  const int server_code = cluster.servers()[0].Wait(absl::ZeroDuration()).value_or(-1);
  EXPECT_TRUE(server_code == 1 || server_code == 3) << server_code << cluster.Logs();
  // The scheduler's final Status says which worker failed and why.
  absl::StatusOr<ClusterStatus> final_status = cluster.FinalStatus();
  ASSERT_TRUE(final_status.ok()) << final_status.status();
  EXPECT_EQ(final_status->job_state(), ABORTED);
  const MemberStatus w = MemberOf(*final_status, WORKER, 0);
  EXPECT_EQ(w.state(), FAILED);
  EXPECT_TRUE(absl::StrContains(w.message(), "/nonexistent/fashion/train-images-idx3-ubyte.gz"))
      << w.message();
}

TEST(BadInputTest, UnreachableSchedulerRetriesThenExits) {
  // A port nobody listens on: bind one, learn it, close it.
  Cluster probe("probe");
  ClusterOptions options;
  options.job_text = SmallJob("clocks: 1");
  ASSERT_TRUE(probe.Start(options).ok());
  const std::string address = probe.scheduler_address();
  ASSERT_TRUE(probe.WaitAll(absl::Seconds(60)).ok()) << probe.Logs();

  for (const std::string bin : {"worker/ps_worker", "server/ps_server"}) {
    std::string out;
    const absl::Time start = absl::Now();
    absl::StatusOr<int> code =
        RunCommand({BinaryPath(bin), "--scheduler=" + address, "--connect_timeout_s=2"}, &out,
                   absl::Seconds(30), "unreachable");
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 3) << out;
    EXPECT_LT(absl::Now() - start, absl::Seconds(15));
    EXPECT_TRUE(absl::StrContains(out, "cannot reach the scheduler at " + address)) << out;
    EXPECT_TRUE(absl::StrContains(out, "retrying")) << out;
  }
}

// A scheduler and one server, waiting for a worker that the test plays by
// hand over gRPC.
class LiveClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ClusterOptions options;
    options.job_text = SmallJob("batch_size: 16\nclocks: 5\nnum_servers: 1\n");
    options.servers = 1;
    options.workers = 1;
    cluster_ = std::make_unique<Cluster>("live");
    // Start the scheduler and server only: the worker is this test.
    options.workers = 0;
    // The test plays the worker by hand and sends no heartbeats.
    options.scheduler_flags = {"--num_workers=1", "--heartbeat_timeout_ms=600000"};
    ASSERT_TRUE(cluster_->Start(options).ok());
    scheduler_ = Scheduler::NewStub(MakeChannel(cluster_->scheduler_address()));
  }

  grpc::Status Register(const std::string& address, uint64_t incarnation, RegisterResponse* resp) {
    RegisterRequest req;
    req.set_role(WORKER);
    req.set_address(address);
    req.set_incarnation(incarnation);
    auto ctx = ContextWithTimeout(absl::Seconds(5));
    return scheduler_->Register(ctx.get(), req, resp);
  }

  // Registers as worker 0 (incarnation 111) and checks the refusals of a
  // second process at the same address and of one worker too many.
  void RegisterOnce() {
    RegisterResponse first;
    ASSERT_TRUE(Register("127.0.0.1:1", 111, &first).ok());
    EXPECT_EQ(first.id(), 0);
    // The same process retrying gets the same id.
    RegisterResponse again;
    ASSERT_TRUE(Register("127.0.0.1:1", 111, &again).ok());
    EXPECT_EQ(again.id(), 0);
    // Another process at the same address: ALREADY_EXISTS.
    RegisterResponse dup;
    grpc::Status st = Register("127.0.0.1:1", 222, &dup);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::ALREADY_EXISTS) << st.error_message();
    // One worker more than the job wants: RESOURCE_EXHAUSTED.
    st = Register("127.0.0.1:2", 333, &dup);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  }

  // Passes the gate of clock 0, which names the server (server_), and
  // checks the refusals of a clock that jumps ahead and of an impostor.
  void OpenGate() {
    AdvanceClockRequest gate;
    gate.set_worker_id(0);
    gate.set_clock(0);
    gate.set_incarnation(111);
    AdvanceClockResponse view;
    auto ctx = ContextWithTimeout(absl::Seconds(10));
    ASSERT_TRUE(scheduler_->AdvanceClock(ctx.get(), gate, &view).ok());
    ASSERT_EQ(view.cluster().servers_size(), 1);
    gate.set_clock(3);
    ctx = ContextWithTimeout(absl::Seconds(10));
    EXPECT_EQ(scheduler_->AdvanceClock(ctx.get(), gate, &view).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
    gate.set_clock(1);
    gate.set_incarnation(999);
    ctx = ContextWithTimeout(absl::Seconds(10));
    EXPECT_EQ(scheduler_->AdvanceClock(ctx.get(), gate, &view).error_code(),
              grpc::StatusCode::FAILED_PRECONDITION);
    server_address_ = view.cluster().servers(0).address();
    server_ = ParameterServer::NewStub(MakeChannel(server_address_));
  }

  // A pull of every chunk (32x16 = 2 chunks, bias, 16x4, bias) at `min_clock`.
  PullRequest PullOfAll(int64_t min_clock = 0) const {
    PullRequest pull;
    pull.set_worker_id(0);
    pull.set_min_clock(min_clock);
    for (int c = 0; c < 5; ++c) pull.add_chunks(c);
    return pull;
  }

  grpc::Status Pull(const PullRequest& req, PullResponse* resp,
                    absl::Duration timeout = absl::Seconds(10)) {
    auto ctx = ContextWithTimeout(timeout);
    return server_->Pull(ctx.get(), req, resp);
  }

  // The weights, retrying UNAVAILABLE: the server registers before its
  // store is ready, as a real worker finds.
  void PullWeights(PullResponse* weights) {
    grpc::Status pulled;
    for (int attempt = 0; attempt < 100; ++attempt) {
      pulled = Pull(PullOfAll(), weights);
      if (pulled.error_code() != grpc::StatusCode::UNAVAILABLE) break;
      absl::SleepFor(absl::Milliseconds(50));
    }
    ASSERT_TRUE(pulled.ok()) << pulled.error_message();
    ASSERT_EQ(weights->chunks_size(), 5);
  }

  // A push of one chunk's `data` for `clock`, in `dtype` (unset: fp32).
  grpc::Status Push(int chunk, const std::string& data, int64_t clock,
                    std::optional<DType> dtype = std::nullopt) {
    PushRequest req;
    req.set_worker_id(0);
    req.set_clock(clock);
    req.set_num_samples(16);
    if (dtype.has_value()) req.set_dtype(*dtype);
    ChunkData* c = req.add_chunks();
    c->set_chunk(chunk);
    c->set_data(data);
    PushResponse resp;
    auto ctx = ContextWithTimeout(absl::Seconds(10));
    return server_->Push(ctx.get(), req, &resp);
  }
  grpc::Status PushZeros(int chunk, size_t bytes, int64_t clock) {
    return Push(chunk, std::string(bytes, '\0'), clock);
  }

  MemberStatus ServerStatusNow() {
    MemberStatus st;
    auto ctx = ContextWithTimeout(absl::Seconds(10));
    EXPECT_TRUE(server_->Status(ctx.get(), StatusRequest(), &st).ok());
    return st;
  }

  void ExpectMalformedPushesRefused(size_t size0);
  void ExpectNonfiniteTakenNotApplied(size_t size0);
  void ExpectBadPullsRefused();
  void ExpectAPullWaitsForItsGuarantee(size_t size0);

  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<Scheduler::Stub> scheduler_;
  std::string server_address_;
  std::unique_ptr<ParameterServer::Stub> server_;
};

// Chunk 0 is `size0` bytes: pushes of another size, an unknown chunk, a
// clock from the future, a dtype the size does not fit or none known, a
// terabyte claimed, and views offered to uncompressed pulls -- each
// INVALID_ARGUMENT, nothing applied.
void LiveClusterTest::ExpectMalformedPushesRefused(size_t size0) {
  grpc::Status st = PushZeros(0, size0 + 4, 0);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(st.error_message(), "values")) << st.error_message();
  EXPECT_EQ(PushZeros(0, size0 - 1, 0).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  st = PushZeros(4242, 64, 0);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(st.error_message(), "unknown chunk 4242")) << st.error_message();
  EXPECT_EQ(PushZeros(0, size0, 7).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  st = Push(0, std::string(size0, '\0'), 0, BF16);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(st.error_message(), "bf16")) << st.error_message();
  EXPECT_EQ(Push(0, std::string(size0, '\0'), 0, static_cast<DType>(7)).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  {  // A chunk claiming a terabyte: refused before anything is allocated.
    grpc::GenericStub raw(MakeChannel(server_address_));
    // PushRequest{clock: 0, chunks: {chunk: 0, data: <2^40 bytes claimed>}}
    const std::string absurd = std::string("\x2a\x09\x08\x00\x12\x80\x80\x80\x80\x80\x20", 11);
    grpc::Slice slice(absurd);
    grpc::ByteBuffer request(&slice, 1), reply;
    grpc::ClientContext rctx;
    absl::Notification done;
    grpc::Status raw_status;
    raw.UnaryCall(&rctx, "/pstrain.ParameterServer/Push", grpc::StubOptions(), &request, &reply,
                  [&](grpc::Status s) {
                    raw_status = s;
                    done.Notify();
                  });
    done.WaitForNotification();
    EXPECT_EQ(raw_status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << raw_status.error_message();
  }
  OfferViewsRequest offer;
  offer.set_worker_id(0);
  HeldView* held = offer.add_views();
  held->set_chunk(0);
  held->set_id(5);
  held->add_weights(1.0f);
  OfferViewsResponse offered;
  auto octx = ContextWithTimeout(absl::Seconds(10));
  st = server_->OfferViews(octx.get(), offer, &offered);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
}

// NaN and Inf gradients (clocks 1 and 2) are taken -- the worker's clock
// moves on -- but not applied; Status counts them.
void LiveClusterTest::ExpectNonfiniteTakenNotApplied(size_t size0) {
  PullResponse before;
  ASSERT_TRUE(Pull(PullOfAll(), &before).ok());
  std::vector<float> bad_grad(size0 / 4, 0.5f);
  bad_grad[3] = std::numeric_limits<float>::quiet_NaN();
  const std::string nan_bytes(reinterpret_cast<const char*>(bad_grad.data()), size0);
  bad_grad[3] = -std::numeric_limits<float>::infinity();
  const std::string inf_bytes(reinterpret_cast<const char*>(bad_grad.data()), size0);
  EXPECT_TRUE(Push(0, nan_bytes, 1, FP32).ok());
  EXPECT_TRUE(Push(0, inf_bytes, 2, FP32).ok());
  PullResponse after;
  ASSERT_TRUE(Pull(PullOfAll(), &after).ok());
  EXPECT_EQ(after.chunks(0).data(), before.chunks(0).data());
  const MemberStatus st = ServerStatusNow();
  EXPECT_EQ(st.server().nonfinite_skipped(), 2);
  EXPECT_GT(st.server().bytes_per_param(), 4.0);
}

// Pulls of an unknown chunk, of a chunk named twice (a reply larger than
// the server's weights) and with an absurd guarantee: INVALID_ARGUMENT.
void LiveClusterTest::ExpectBadPullsRefused() {
  PullRequest bad;
  bad.set_worker_id(0);
  bad.add_chunks(4242);
  PullResponse weights;
  EXPECT_EQ(Pull(bad, &weights).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  bad.set_chunks(0, 0);
  bad.add_chunks(0);
  EXPECT_EQ(Pull(bad, &weights).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  bad.mutable_chunks()->RemoveLast();
  bad.set_min_clock(1000000);
  EXPECT_EQ(Pull(bad, &weights).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

// A pull whose read guarantee does not hold yet (chunk 0 has clocks 0..2
// applied) waits: until its deadline, or until the push that makes it
// hold; Status shows what the server waits on, and since when.
void LiveClusterTest::ExpectAPullWaitsForItsGuarantee(size_t size0) {
  PullRequest ahead;
  ahead.set_worker_id(0);
  ahead.add_chunks(0);
  ahead.set_min_clock(4);
  PullResponse weights;
  EXPECT_EQ(Pull(ahead, &weights, absl::Milliseconds(300)).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  grpc::Status waited;
  PullResponse waited_weights;
  std::thread waiter([&] { waited = Pull(ahead, &waited_weights); });
  absl::SleepFor(absl::Milliseconds(300));
  const MemberStatus waiting = ServerStatusNow();
  EXPECT_EQ(waiting.waits_size(), 1) << waiting.DebugString();
  if (waiting.waits_size() == 1) {
    EXPECT_TRUE(absl::StrContains(waiting.waits(0).what(),
                                  "pull by worker 0 of 1 chunks for clock 0, waiting for every "
                                  "worker's updates before clock 4: behind: worker 0 (3 applied)"))
        << waiting.waits(0).what();
    const int64_t age = absl::ToUnixMillis(absl::Now()) - waiting.waits(0).since_unix_ms();
    EXPECT_GE(age, 200);
    EXPECT_LT(age, 10000);
  }
  EXPECT_TRUE(PushZeros(0, size0, 3).ok());
  waiter.join();
  EXPECT_TRUE(waited.ok()) << waited.error_message();
  EXPECT_EQ(waited_weights.chunks_size(), 1);
}

TEST_F(LiveClusterTest, RegisteringTwiceAndBadPushesAreRefused) {
  ASSERT_NO_FATAL_FAILURE(RegisterOnce());
  ASSERT_NO_FATAL_FAILURE(OpenGate());
  PullResponse weights;
  ASSERT_NO_FATAL_FAILURE(PullWeights(&weights));
  const size_t size0 = weights.chunks(0).data().size();
  ExpectMalformedPushesRefused(size0);
  // Nothing was applied by the refused pushes; a good one still goes through.
  EXPECT_TRUE(PushZeros(0, size0, 0).ok());
  ASSERT_NO_FATAL_FAILURE(ExpectNonfiniteTakenNotApplied(size0));
  ExpectBadPullsRefused();
  ExpectAPullWaitsForItsGuarantee(size0);
  // The daemons are alive and well.
  EXPECT_TRUE(cluster_->scheduler().running());
  EXPECT_FALSE(cluster_->scheduler().Wait(absl::ZeroDuration()).ok());
  EXPECT_FALSE(cluster_->servers()[0].Wait(absl::ZeroDuration()).ok());
}

}  // namespace
}  // namespace testing
}  // namespace pstrain
