// The shared-memory data plane between workers and servers on one host
// (common/shm.h): real daemons on loopback. The payloads move through the
// segments and the weights come out bit for bit as with gRPC messages; the
// path turns off by a flag on either side; kill -9 of any daemon leaves no
// file behind and the server drops a killed worker's segments; a server
// refuses what does not fit its segments with the right status. (Every
// other multi-process test runs over shared memory too, since it is on by
// default: the recoveries of fault_test, restart_test and chaos_test.)
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/rpc.h"
#include "common/shm.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "tests/cluster.h"
#include "tests/test_jobs.h"
#include "tests/wait.h"

namespace pstrain {
namespace testing {
namespace {

ClusterOptions Options(int clocks, int slowdown_ms = 0) {
  ClusterOptions options;
  options.job_text = SixteenClassJob(absl::StrCat("clocks: ", clocks, "\nseed: 7\nchunk_bytes: 1024"));
  options.servers = 2;
  options.workers = 2;
  options.scheduler_flags = {"--heartbeat_timeout_ms=1500", "--end_grace_ms=3000"};
  options.worker_flags.assign(2, {absl::StrCat("--straggler=fixed:", slowdown_ms)});
  return options;
}

struct Outcome {
  TensorSet weights;
  MemberStatus worker, server;
};

// Runs `options` to the end; worker 0's weights, worker 0 and server 0 as
// the final Status has them.
Outcome RunToEnd(const std::string& name, const ClusterOptions& options) {
  Cluster cluster(name);
  Outcome out;
  EXPECT_TRUE(cluster.Start(options).ok()) << cluster.Logs();
  absl::StatusOr<int> code = cluster.WaitAll(absl::Seconds(120));
  EXPECT_TRUE(code.ok() && *code == 0) << cluster.Logs();
  absl::StatusOr<ClusterStatus> st = cluster.FinalStatus();
  EXPECT_TRUE(st.ok()) << cluster.Logs();
  if (!st.ok()) return out;
  out.weights = ReadWeights(cluster.worker_weights(0));
  out.worker = MemberOf(*st, WORKER, 0);
  out.server = MemberOf(*st, SERVER, 0);
  return out;
}

// `wire_dtype` in both runs (bf16: the slots are wider than the values).
void SameWeightsBothWays(const std::string& wire_dtype) {
  ClusterOptions on = Options(60);
  for (auto& flags : on.worker_flags) flags.push_back("--wire_dtype=" + wire_dtype);
  ClusterOptions off = on;
  for (auto& flags : off.worker_flags) flags.push_back("--noshm");
  const Outcome shm = RunToEnd("shm_on_" + wire_dtype, on);
  const Outcome messages = RunToEnd("shm_off_" + wire_dtype, off);
  ASSERT_GT(shm.weights.tensors_size(), 0);
  EXPECT_EQ(MaxDifference(shm.weights, messages.weights), 0.0);
  // Every payload of the servers went through the segments.
  EXPECT_GT(shm.server.shm_bytes(), 0);
  EXPECT_EQ(shm.server.shm_bytes(), shm.server.bytes_in() + shm.server.bytes_out());
  EXPECT_GT(shm.worker.shm_bytes(), 0);
  EXPECT_EQ(messages.worker.shm_bytes(), 0);
  EXPECT_EQ(messages.server.shm_bytes(), 0);
  EXPECT_GT(messages.server.bytes_in(), 0);
  // The requests went as frames on the segments' sockets (the doorbell),
  // none without shared memory.
  EXPECT_GT(shm.worker.shm_rings(), 0);
  EXPECT_GT(shm.server.shm_rings(), 0);
  EXPECT_EQ(messages.worker.shm_rings(), 0);
  EXPECT_EQ(messages.server.shm_rings(), 0);
  if (wire_dtype != "fp32") return;
  // The payloads in shared memory, the requests in gRPC calls: the same too.
  ClusterOptions calls = on;
  for (auto& flags : calls.worker_flags) flags.push_back("--noshm_doorbell");
  const Outcome grpc_calls = RunToEnd("shm_grpc_calls", calls);
  EXPECT_EQ(MaxDifference(shm.weights, grpc_calls.weights), 0.0);
  EXPECT_GT(grpc_calls.server.shm_bytes(), 0);
  EXPECT_EQ(grpc_calls.server.shm_rings(), 0);
}

TEST(ShmTest, PayloadsMoveThroughSharedMemoryAndTheWeightsMatchTheMessages) {
  SameWeightsBothWays("fp32");
}

TEST(ShmTest, Bf16PayloadsThroughSharedMemoryToo) { SameWeightsBothWays("bf16"); }

TEST(ShmTest, AServerWithSharedMemoryOffGetsThePayloadsInMessages) {
  ClusterOptions options = Options(30);
  options.server_flags = {"--noshm"};
  const Outcome out = RunToEnd("shm_server_off", options);
  EXPECT_EQ(out.worker.state(), FINISHED);
  EXPECT_EQ(out.worker.shm_bytes(), 0);
  EXPECT_EQ(out.server.shm_bytes(), 0);
  EXPECT_GT(out.server.bytes_in(), 0);
}

// Entries of a folder (empty if it cannot be read).
std::set<std::string> Entries(const std::string& dir) {
  std::set<std::string> out;
  std::error_code error;
  for (const auto& e : std::filesystem::directory_iterator(dir, error)) out.insert(e.path());
  return out;
}

// Starts a long slowed job and waits until every worker reached `clock`;
// server 0's address ("" on failure, with the test failed).
std::string StartAndReach(Cluster& cluster, int64_t clock) {
  if (!cluster.Start(Options(100000, 5)).ok() ||
      !WaitForStatus(
          cluster.scheduler_address(),
          [clock](const ClusterStatus& st) { return SlowestClock(st) >= clock; },
          absl::Seconds(60))) {
    ADD_FAILURE() << cluster.Logs();
    return "";
  }
  absl::StatusOr<ClusterStatus> st = SchedulerStatus(cluster.scheduler_address());
  return st.ok() ? MemberOf(*st, SERVER, 0).address() : "";
}

// Server `address`'s Status once it has `segments` attached (or the last
// one after 30 s).
MemberStatus WaitForSegments(const std::string& address, int segments) {
  MemberStatus st = ServerStatus(address);
  for (int i = 0; i < 1500 && st.shm_segments() != segments; ++i) {
    absl::SleepFor(absl::Milliseconds(20));
    st = ServerStatus(address);
  }
  return st;
}

TEST(ShmTest, KillNineOfEveryDaemonLeavesNothingBehind) {
  // Where a segment with a name would show: the daemons' temporary folder
  // (the test's own, which they inherit), and /dev/shm and /tmp, where
  // other processes of the machine come and go, so only names of ours
  // count there. (The segments are memfds, which have no names: this
  // guards that; the segment counts above are what the kill changes.)
  const char* test_tmp = std::getenv("TEST_TMPDIR");
  const std::vector<std::string> dirs = {test_tmp != nullptr ? test_tmp : "/tmp", "/dev/shm",
                                         "/tmp"};
  std::vector<std::set<std::string>> before;
  for (const std::string& d : dirs) before.push_back(Entries(d));
  Cluster cluster("shm_kill");
  const std::string server = StartAndReach(cluster, 20);
  ASSERT_FALSE(server.empty());
  // Each worker attaches a segment for its pushes and one for its pulls.
  const MemberStatus attached = WaitForSegments(server, 4);
  EXPECT_EQ(attached.shm_segments(), 4) << cluster.Logs();
  EXPECT_GT(attached.shm_bytes(), 0);
  // A killed worker's segments go with it.
  cluster.workers()[1].Kill(SIGKILL);
  const MemberStatus after = WaitForSegments(server, 2);
  EXPECT_EQ(after.shm_segments(), 2) << after.DebugString();
  cluster.workers()[0].Kill(SIGKILL);
  for (Process& s : cluster.servers()) s.Kill(SIGKILL);
  cluster.scheduler().Kill(SIGKILL);
  for (size_t i = 0; i < dirs.size(); ++i) {
    for (const std::string& e : Entries(dirs[i])) {
      // The cluster's own folder (logs, port files) is the test's.
      if (before[i].count(e) > 0 || e == cluster.dir()) continue;
      if (i > 0 && !absl::StrContains(e, "pstrain-shm") && !absl::StrContains(e, "pstrain-ps-")) {
        continue;
      }
      ADD_FAILURE() << "left behind: " << e;
    }
  }
}

// A ticket someone made up, on the socket `open` is granted: refused, no
// descriptor.
void ExpectAForgedTicketRefused(ParameterServer::Stub& stub, const OpenShmRequest& open) {
  OpenShmResponse granted;
  ASSERT_TRUE(stub.OpenShm(ContextWithTimeout(absl::Seconds(5)).get(), open, &granted).ok());
  absl::StatusOr<int> sock = ConnectAbstract(granted.socket_name(), absl::Seconds(5));
  ASSERT_TRUE(sock.ok()) << sock.status();
  const std::string forged(16, 'x');
  ASSERT_TRUE(SendWithFd(*sock, forged.data(), forged.size(), -1).ok());
  ShmGrant grant;
  int fd = -1;
  const absl::Status answer = RecvWithFd(*sock, &grant, sizeof(grant), &fd);
  EXPECT_TRUE(!answer.ok() || grant.id == 0);
  EXPECT_LT(fd, 0);
  close(*sock);
}

// A chunk the server holds: the first a plain pull gets (-1: none).
int32_t AChunkOf(ParameterServer::Stub& stub) {
  for (int32_t c = 0; c < 64; ++c) {
    PullRequest plain;
    plain.add_chunks(c);
    PullResponse reply;
    if (stub.Pull(ContextWithTimeout(absl::Seconds(5)).get(), plain, &reply).ok()) return c;
  }
  return -1;
}

// The segment's socket `sock` as a doorbell: a frame of no known method,
// and a push or pull naming another segment than its connection's
// (`segment`), are refused with INVALID_ARGUMENT (answered under their
// seq); a pull of its own chunk `mine` goes.
void ExpectDoorbellRefusals(int sock, uint64_t segment, int32_t mine) {
  PullRequest own;
  own.add_chunks(mine);
  own.set_shm_segment(segment);
  own.set_shm_sequence(7);
  PullRequest other = own;
  other.set_shm_segment(segment + 1);
  PushRequest push;
  push.set_num_samples(1);
  push.set_shm_segment(segment + 1);
  push.add_chunks()->set_chunk(mine);
  const std::vector<std::tuple<int32_t, std::string, grpc::StatusCode>> frames = {
      {99, "", grpc::StatusCode::INVALID_ARGUMENT},
      {kShmPush, push.SerializeAsString(), grpc::StatusCode::INVALID_ARGUMENT},
      {kShmPull, other.SerializeAsString(), grpc::StatusCode::INVALID_ARGUMENT},
      {kShmPull, own.SerializeAsString(), grpc::StatusCode::OK}};
  FrameReader reader;
  for (size_t i = 0; i < frames.size(); ++i) {
    const auto& [method, body, code] = frames[i];
    const std::string frame = EncodeFrame(method, 100 + i, "", body);
    ASSERT_EQ(send(sock, frame.data(), frame.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(frame.size()));
    ShmFrame answer;
    bool got = false;
    for (int tries = 0; tries < 500 && !got; ++tries) {
      absl::StatusOr<bool> next = reader.Next(&answer);
      ASSERT_TRUE(next.ok()) << next.status();
      got = *next;
      if (!got) {
        absl::SleepFor(absl::Milliseconds(10));
        ASSERT_TRUE(reader.Fill(sock).ok());
      }
    }
    ASSERT_TRUE(got) << "frame " << i;
    EXPECT_EQ(answer.header.seq, 100 + i);
    EXPECT_EQ(answer.header.code, code) << "frame " << i << ": " << answer.message;
  }
}

TEST(ShmTest, AServerRefusesWhatDoesNotFitItsSegments) {
  Cluster cluster("shm_refusals");
  const std::string server = StartAndReach(cluster, 5);
  ASSERT_FALSE(server.empty());
  auto stub = ParameterServer::NewStub(MakeChannel(server));
  // From another host (another boot id): no segment.
  OpenShmRequest open;
  open.set_boot_id("another-host");
  OpenShmResponse granted;
  EXPECT_EQ(stub->OpenShm(ContextWithTimeout(absl::Seconds(5)).get(), open, &granted).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  open.set_boot_id(BootId());
  ASSERT_NO_FATAL_FAILURE(ExpectAForgedTicketRefused(*stub, open));
  // With a real ticket, a segment; a push naming it must still fit it: a
  // payload in the message as well, or a chunk the server does not hold, is
  // INVALID_ARGUMENT.
  ASSERT_TRUE(stub->OpenShm(ContextWithTimeout(absl::Seconds(5)).get(), open, &granted).ok());
  absl::StatusOr<int> sock = ConnectAbstract(granted.socket_name(), absl::Seconds(5));
  ASSERT_TRUE(sock.ok()) << sock.status();
  ShmGrant grant;
  int fd = -1;
  ASSERT_TRUE(SendWithFd(*sock, granted.ticket().data(), granted.ticket().size(), -1).ok());
  ASSERT_TRUE(RecvWithFd(*sock, &grant, sizeof(grant), &fd).ok());
  ASSERT_NE(grant.id, 0u);
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(ShmSegment::Adopt(fd, granted.segment_bytes()).ok());
  const int32_t mine = AChunkOf(*stub);
  ASSERT_GE(mine, 0);
  // Pulls through the segment write it for the newest attempt only: an
  // older attempt's answer would overwrite newer weights.
  for (const auto& [sequence, code] :
       {std::pair{5, grpc::StatusCode::OK}, std::pair{5, grpc::StatusCode::OK},
        std::pair{3, grpc::StatusCode::ABORTED}, std::pair{6, grpc::StatusCode::OK}}) {
    PullRequest pull;
    pull.add_chunks(mine);
    pull.set_shm_segment(grant.id);
    pull.set_shm_sequence(sequence);
    PullResponse reply;
    EXPECT_EQ(stub->Pull(ContextWithTimeout(absl::Seconds(5)).get(), pull, &reply).error_code(),
              code)
        << "attempt " << sequence;
  }
  for (const bool payload : {true, false}) {
    PushRequest push;
    push.set_num_samples(1);
    push.set_shm_segment(grant.id);
    ChunkData* chunk = push.add_chunks();
    chunk->set_chunk(payload ? mine : 1 << 30);
    if (payload) chunk->set_data(std::string(16, '\0'));
    PushResponse pushed;
    EXPECT_EQ(stub->Push(ContextWithTimeout(absl::Seconds(5)).get(), push, &pushed).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT)
        << (payload ? "a payload in the message too" : "a chunk not of this server");
  }
  ExpectDoorbellRefusals(*sock, grant.id, mine);
  close(*sock);
  // A push naming a segment the server never granted (or no longer holds):
  // NOT_FOUND, and a worker then sends its payloads in the message.
  PushRequest push;
  push.set_worker_id(0);
  push.set_clock(0);
  push.set_num_samples(1);
  push.set_shm_segment(12345);
  push.add_chunks()->set_chunk(mine);
  PushResponse pushed;
  EXPECT_EQ(stub->Push(ContextWithTimeout(absl::Seconds(5)).get(), push, &pushed).error_code(),
            grpc::StatusCode::NOT_FOUND);
  PullRequest pull;
  pull.add_chunks(mine);
  pull.set_shm_segment(12345);
  PullResponse pulled;
  EXPECT_EQ(stub->Pull(ContextWithTimeout(absl::Seconds(5)).get(), pull, &pulled).error_code(),
            grpc::StatusCode::NOT_FOUND);
  // The cluster trains on, unharmed.
  const int64_t now = SlowestClock(*SchedulerStatus(cluster.scheduler_address()));
  EXPECT_TRUE(WaitForStatus(
      cluster.scheduler_address(),
      [now](const ClusterStatus& st) { return SlowestClock(st) >= now + 5; }, absl::Seconds(60)))
      << cluster.Logs();
}

}  // namespace
}  // namespace testing
}  // namespace pstrain
