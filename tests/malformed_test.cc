// 10,000 malformed requests to each daemon (scheduler, server, worker) over
// real gRPC: random bytes, wrong sizes, unknown chunks and members, absurd
// claimed sizes, clocks and generations from the future, bad roles. Every one is
// answered with an error status (none accepted, none left unanswered), the
// daemon stays up and answers Status, and its resident memory grows by
// less than 50 MiB.
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/params.h"
#include "common/partition.h"
#include "common/rpc.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "tests/cluster.h"
#include "tests/test_jobs.h"
#include "tests/wait.h"

namespace pstrain {
namespace testing {
namespace {

constexpr int kRequests = 10000;

int64_t ResidentBytes(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

// Protobuf wire encoding, enough to forge requests.
std::string Varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
  return out;
}
std::string Field(int field, uint64_t v) { return Varint(field << 3) + Varint(v); }
std::string Bytes(int field, const std::string& b) {
  return Varint((field << 3) | 2) + Varint(b.size()) + b;
}

struct Call {
  std::string method;
  std::string body;
};

struct Outcome {
  int ok = 0, refused = 0, unanswered = 0;
  std::map<grpc::StatusCode, int> codes;
};

// Sends every call, 64 in flight at a time.
Outcome Send(const std::string& address, const std::vector<Call>& calls) {
  grpc::GenericStub stub(MakeChannel(address));
  Outcome out;
  constexpr size_t kWindow = 64;
  for (size_t begin = 0; begin < calls.size(); begin += kWindow) {
    const size_t n = std::min(kWindow, calls.size() - begin);
    grpc::CompletionQueue cq;
    std::vector<std::unique_ptr<grpc::ClientContext>> ctx(n);
    std::vector<std::unique_ptr<grpc::GenericClientAsyncResponseReader>> readers(n);
    std::vector<grpc::ByteBuffer> replies(n);
    std::vector<grpc::Status> statuses(n);
    for (size_t i = 0; i < n; ++i) {
      const Call& c = calls[begin + i];
      ctx[i] = ContextWithTimeout(absl::Seconds(10));
      grpc::Slice slice(c.body);
      const grpc::ByteBuffer request(&slice, 1);
      readers[i] = stub.PrepareUnaryCall(ctx[i].get(), c.method, request, &cq);
      readers[i]->StartCall();
      readers[i]->Finish(&replies[i], &statuses[i], reinterpret_cast<void*>(i));
    }
    for (size_t left = n; left > 0; --left) {
      void* tag;
      bool ok;
      if (!cq.Next(&tag, &ok)) break;
    }
    for (size_t i = 0; i < n; ++i) {
      const grpc::StatusCode code = statuses[i].error_code();
      ++out.codes[code];
      if (code == grpc::StatusCode::OK) {
        ++out.ok;
      } else if (code == grpc::StatusCode::UNAVAILABLE ||
                 code == grpc::StatusCode::DEADLINE_EXCEEDED) {
        ++out.unanswered;
      } else {
        ++out.refused;
      }
    }
  }
  return out;
}

// Bytes no protobuf parser takes: a tag of field 0, or an invalid wire type.
std::string Garbage(std::mt19937_64& rng) {
  std::string s(1 + rng() % 64, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  s[0] = rng() % 2 == 0 ? '\0' : '\x07';
  return s;
}

void Check(const std::string& who, const Outcome& o, int64_t rss_before, int64_t rss_after) {
  std::string codes;
  for (const auto& [code, n] : o.codes) absl::StrAppend(&codes, " ", code, ":", n);
  std::printf(
      "%s: %d refused, %d accepted, %d unanswered (codes%s); resident memory %.1f -> "
      "%.1f MiB\n",
      who.c_str(), o.refused, o.ok, o.unanswered, codes.c_str(), rss_before / 1048576.0,
      rss_after / 1048576.0);
  EXPECT_EQ(o.refused, kRequests) << who;
  EXPECT_EQ(o.ok, 0) << who;
  EXPECT_EQ(o.unanswered, 0) << who;
  EXPECT_LT(rss_after - rss_before, 50 << 20) << who;
}

class MalformedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    job_text_ = SmallJob(
        "batch_size: 16\nclocks: 1000\n"
        "tables { name: \"words\" width: 4 num_ids: 1000 optimizer { type: SGD } }\n");
    ClusterOptions options;
    options.job_text = job_text_;
    options.servers = 1;
    options.workers = 1;
    // Two workers expected, one started: the job waits, every daemon idles.
    options.scheduler_flags = {"--num_workers=2"};
    ASSERT_TRUE(cluster_.Start(options).ok()) << cluster_.Logs();
    // Until the server and worker registered and serve.
    WaitForStatus(
        cluster_.scheduler_address(),
        [&](const ClusterStatus& st) {
          if (st.members_size() == 2) status_ = st;
          return st.members_size() == 2;
        },
        absl::Seconds(30));
    ASSERT_EQ(status_.members_size(), 2) << cluster_.Logs();
    absl::StatusOr<JobSpec> job = ParseJobSpecText(job_text_, "job");
    ASSERT_TRUE(job.ok());
    ApplyJobDefaults(&*job);
    job_ = *job;
    job_.set_num_workers(2);
  }

  // Samples `make` until kRequests calls, sends them to `pid`'s daemon at
  // `address` after 200 warm-up calls, and checks the outcome.
  void Attack(const std::string& who, const std::string& address, pid_t pid,
              const std::function<Call(std::mt19937_64&)>& make) {
    std::mt19937_64 rng(42);
    std::vector<Call> warmup, calls;
    for (int i = 0; i < 200; ++i) warmup.push_back(make(rng));
    for (int i = 0; i < kRequests; ++i) calls.push_back(make(rng));
    (void)Send(address, warmup);
    ASSERT_GT(ResidentBytes(pid), 0) << who << " is not running";
    const int64_t before = ResidentBytes(pid);
    const Outcome o = Send(address, calls);
    const int64_t after = ResidentBytes(pid);
    Check(who, o, before, after);
    // Still up and answering.
    EXPECT_TRUE(SchedulerStatus(cluster_.scheduler_address()).ok()) << who;
    EXPECT_GT(ResidentBytes(pid), 0) << who << " is gone";
  }

  Cluster cluster_{"malformed"};
  std::string job_text_;
  JobSpec job_;
  ClusterStatus status_;
};

TEST_F(MalformedTest, TheServerRefusesEveryMalformedPushAndPull) {
  const Partition partition =
      Partition::Make(ModelParams(job_.model()), job_.chunk_bytes(), 1).value();
  const int chunks = static_cast<int>(partition.chunks().size());
  const std::string address = status_.members(0).address();
  const char kPush[] = "/pstrain.ParameterServer/Push";
  const char kPull[] = "/pstrain.ParameterServer/Pull";
  const char kPullRows[] = "/pstrain.ParameterServer/PullRows";
  const char kPushRows[] = "/pstrain.ParameterServer/PushRows";
  // Row requests (PullRowsRequest, PushRowsRequest): worker, table, ids (packed fixed64).
  auto rows = [&](int worker, const std::string& table, std::vector<uint64_t> ids) {
    std::string packed;
    for (uint64_t id : ids) packed.append(reinterpret_cast<const char*>(&id), 8);
    return Field(1, worker) + Bytes(2, table) + Bytes(3, packed);
  };
  auto chunk_data = [&](int chunk, size_t bytes, std::mt19937_64& rng) {
    std::string data(bytes, '\0');
    for (char& c : data) c = static_cast<char>(rng() % 64);  // small finite floats
    return Bytes(5, Field(1, chunk) + Bytes(2, data));
  };
  auto push = [&](int worker, uint64_t clock, const std::string& chunks_field, int dtype = 0) {
    return Field(1, worker) + Field(2, clock) + Field(3, 4) + Field(4, dtype) + chunks_field;
  };
  Attack("server", address, cluster_.servers()[0].pid(), [&](std::mt19937_64& rng) -> Call {
    const int c = static_cast<int>(rng() % chunks);
    const size_t bytes = partition.chunks()[c].numel * 4;
    switch (rng() % 16) {
      case 0:
        return {kPush, Garbage(rng)};
      case 1:  // wrong size
        return {kPush, push(0, 0, chunk_data(c, bytes + 4 * (1 + rng() % 5), rng))};
      case 2:  // unknown chunk
        return {kPush, push(0, 0, chunk_data(chunks + rng() % 1000, bytes, rng))};
      case 3:  // a payload claiming 2^40 bytes
        return {kPush, push(0, 0, Varint((5 << 3) | 2) + Varint(uint64_t{1} << 40) + "abc")};
      case 4:  // a clock from the future
        return {kPush, push(0, 1000000 + rng() % 1000, chunk_data(c, bytes, rng))};
      case 5:  // an unknown worker
        return {kPush, push(2 + rng() % 100, 0, chunk_data(c, bytes, rng))};
      case 6:  // an unknown dtype
        return {kPush, push(0, 0, chunk_data(c, bytes, rng), 3 + rng() % 100)};
      case 7:
        return {kPull, Garbage(rng)};
      case 8:  // unknown chunk
        return {kPull, Field(2, 0) + Bytes(5, Varint(chunks + rng() % 1000))};
      case 9:  // a read guarantee past the job's end
        return {kPull, Field(3, 1001 + rng() % 1000000) + Bytes(5, Varint(c))};
      case 10:  // a chunk named twice
        return {kPull, Bytes(5, Varint(c) + Varint(c))};
      case 11:  // an unknown worker
        return {kPull, Field(1, 2 + rng() % 100) + Bytes(5, Varint(c))};
      case 12:
        return {rng() % 2 == 0 ? kPullRows : kPushRows, Garbage(rng)};
      case 13:  // a table the job does not declare, or an unknown worker
        return {kPullRows, rng() % 2 == 0 ? rows(0, "nouns", {rng() % 1000})
                                          : rows(2 + rng() % 100, "words", {rng() % 1000})};
      case 14:  // ids beyond num_ids
        return {kPullRows, rows(0, "words", {rng() % 1000, 1000 + rng() % 1000000})};
      default:  // a push to rows never pulled (nothing pulls here), or of the wrong width
        return {kPushRows, rows(0, "words", {rng() % 1000}) +
                               Bytes(5, std::string(4 * (rng() % 2 == 0 ? 4 : 3), '\0'))};
    }
  });
}

TEST_F(MalformedTest, TheSchedulerRefusesEveryMalformedRequest) {
  const std::string address = cluster_.scheduler_address();
  Attack("scheduler", address, cluster_.scheduler().pid(), [&](std::mt19937_64& rng) -> Call {
    const char* methods[] = {"Register", "Heartbeat", "AdvanceClock", "ReduceNorm"};
    const std::string method = absl::StrCat("/pstrain.Scheduler/", methods[rng() % 4]);
    const uint64_t stranger = rng();  // no member has this incarnation
    switch (rng() % 9) {
      case 0:
        return {method, Garbage(rng)};
      case 1:  // a role that does not register
        return {"/pstrain.Scheduler/Register",
                Field(1, rng() % 2 == 0 ? 1 : 4 + rng() % 100) + Bytes(2, "h:1")};
      case 2:  // no address, or an absurd one
        return {"/pstrain.Scheduler/Register",
                Field(1, 3) + (rng() % 2 == 0 ? "" : Bytes(2, std::string(600, 'x')))};
      case 3:  // an id past the job's
        return {"/pstrain.Scheduler/Register",
                Field(1, 2) + Bytes(2, "h:2") + Field(4, 5 + rng() % 100)};
      case 4:  // a heartbeat from a stranger
        return {"/pstrain.Scheduler/Heartbeat",
                Bytes(1, Field(1, 3) + Field(2, rng() % 4)) + Field(2, stranger)};
      case 5:  // a clock from the future, from a stranger
        return {"/pstrain.Scheduler/AdvanceClock",
                Field(1, rng() % 2) + Field(2, 1000000 + rng() % 1000) + Field(3, stranger)};
      case 6:  // an unknown worker
        return {"/pstrain.Scheduler/AdvanceClock", Field(1, 2 + rng() % 1000) + Field(2, 1)};
      case 7:  // an generation from the future
        return {"/pstrain.Scheduler/AdvanceClock",
                Field(1, 0) + Field(3, stranger) + Field(4, 1 + rng() % 1000)};
      default:  // a norm from an unknown server
        return {"/pstrain.Scheduler/ReduceNorm", Field(1, 1 + rng() % 100) + Field(3, 0)};
    }
  });
}

TEST_F(MalformedTest, TheWorkerRefusesEveryMalformedRequest) {
  const std::string address = status_.members(1).address();
  // The method exists: a well-formed request is answered.
  EXPECT_EQ(Send(address, {{"/pstrain.Worker/Status", ""}}).ok, 1);
  Attack("worker", address, cluster_.workers()[0].pid(), [&](std::mt19937_64& rng) -> Call {
    return {"/pstrain.Worker/Status", Garbage(rng)};
  });
}

// Bytes that are not a StatusRequest: INVALID_ARGUMENT from every daemon
// (gRPC's own parsing answered INTERNAL or UNIMPLEMENTED).
TEST_F(MalformedTest, AStatusRequestThatDoesNotParseIsInvalidArgument) {
  const std::vector<std::pair<std::string, std::string>> daemons = {
      {"/pstrain.Scheduler/Status", cluster_.scheduler_address()},
      {"/pstrain.ParameterServer/Status", status_.members(0).address()},
      {"/pstrain.Worker/Status", status_.members(1).address()}};
  std::mt19937_64 rng(7);
  for (const auto& [method, address] : daemons) {
    std::vector<Call> calls;
    for (int i = 0; i < 50; ++i) calls.push_back({method, "\x0a\xff" + Garbage(rng)});
    const Outcome o = Send(address, calls);
    EXPECT_EQ(o.codes.size(), 1u) << method;
    EXPECT_EQ(o.codes.count(grpc::StatusCode::INVALID_ARGUMENT), 1u) << method;
    EXPECT_EQ(Send(address, {{method, ""}}).ok, 1) << method;  // a real one is answered
  }
}

}  // namespace
}  // namespace testing
}  // namespace pstrain
