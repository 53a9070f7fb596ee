// psctl drain, export and the bad input psctl meets, against real daemons:
// a drained job ends DONE at a clock with a complete checkpoint; its export
// holds exactly the weights the workers read at that clock; a job started
// again on the checkpoint resumes there.
#include <cstring>
#include <map>
#include <regex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "proto/member.pb.h"
#include "proto/status.pb.h"
#include "tests/cluster.h"
#include "tests/test_jobs.h"
#include "tests/wait.h"

namespace pstrain {
namespace testing {
namespace {

// A safetensors file read with nothing but its documented layout: an 8-byte
// little-endian header size, a JSON header of flat tensor entries, the data.
struct Tensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};
std::map<std::string, Tensor> ReadSafetensors(const std::string& bytes) {
  std::map<std::string, Tensor> out;
  if (bytes.size() < 8) return out;
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  if (8 + n > bytes.size()) return out;
  const std::string header = bytes.substr(8, n), data = bytes.substr(8 + n);
  const std::regex entry(
      R"re("([^"]+)":\{"dtype":"F32","shape":\[([0-9,]*)\],"data_offsets":\[([0-9]+),([0-9]+)\]\})re");
  for (std::sregex_iterator it(header.begin(), header.end(), entry), end; it != end; ++it) {
    Tensor t;
    std::stringstream dims((*it)[2].str());
    for (std::string d; std::getline(dims, d, ',');) t.shape.push_back(std::stoll(d));
    const size_t a = std::stoull((*it)[3]), b = std::stoull((*it)[4]);
    if (b < a || b > data.size()) continue;
    t.values.resize((b - a) / 4);
    std::memcpy(t.values.data(), data.data() + a, b - a);
    out[(*it)[1]] = std::move(t);
  }
  return out;
}

std::string Psctl(const std::vector<std::string>& args, int* code) {
  std::vector<std::string> argv = {BinaryPath("tools/psctl")};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string output;
  absl::StatusOr<int> rc = RunCommand(argv, &output, absl::Seconds(120), "psctl");
  *code = rc.ok() ? *rc : -1;
  return output;
}

// Waits until `workers` workers of the cluster have trained `clocks` clocks.
bool WaitForClock(const std::string& scheduler, int64_t clocks, int workers = 2) {
  return WaitForStatus(
      scheduler,
      [&](const ClusterStatus& st) { return WorkersAt(st, clocks) == workers; }, absl::Seconds(60),
      absl::Milliseconds(100));
}

// psctl export --checkpoint_dir of `dir` (the newest complete set) holds,
// element for element, the weights each of the cluster's two workers wrote.
void ExpectTheExportIsTheWorkersWeights(const Cluster& cluster, const std::string& dir) {
  int code = 0;
  const std::string out = cluster.dir() + "/model.safetensors";
  const std::string exported = Psctl({"export", "--checkpoint_dir=" + dir, "--out=" + out}, &code);
  ASSERT_EQ(code, 0) << exported;
  const std::map<std::string, Tensor> tensors = ReadSafetensors(ReadFile(out));
  for (int w = 0; w < 2; ++w) {
    const TensorSet read = ReadWeights(cluster.worker_weights(w));
    ASSERT_EQ(read.tensors_size(), static_cast<int>(tensors.size())) << exported;
    for (const NamedTensor& t : read.tensors()) {
      ASSERT_TRUE(tensors.count(t.name())) << t.name();
      const Tensor& e = tensors.at(t.name());
      EXPECT_EQ(e.shape, std::vector<int64_t>(t.shape().begin(), t.shape().end())) << t.name();
      ASSERT_EQ(e.values.size(), static_cast<size_t>(t.values_size())) << t.name();
      for (int i = 0; i < t.values_size(); ++i) {
        ASSERT_EQ(e.values[i], t.values(i)) << t.name() << " at " << i;
      }
    }
  }
}

TEST(DrainTest, ADrainedJobEndsWithACheckpointThatExportsAndResumes) {
  const std::string job = SmallJob("batch_size: 32\nclocks: 300\n");
  Cluster first("drain");
  const std::string dir = first.dir() + "/checkpoints";
  ClusterOptions options;
  options.job_text = job;
  options.servers = 2;
  options.workers = 2;
  // Scheduled checkpoints far apart: the drain's is the one written.
  options.scheduler_flags = {"--checkpoint_dir=" + dir, "--checkpoint_every=1000"};
  options.worker_flags = {{"--straggler=fixed:10"}, {"--straggler=fixed:10"}};
  ASSERT_TRUE(first.Start(options).ok()) << first.Logs();
  ASSERT_TRUE(WaitForClock(first.scheduler_address(), 10)) << first.Logs();

  // A live export: a checkpoint now, then its weights, every parameter.
  int code = 0;
  const std::string live = first.dir() + "/live.safetensors";
  const std::string live_said =
      Psctl({"export", "--scheduler=" + first.scheduler_address(), "--out=" + live}, &code);
  ASSERT_EQ(code, 0) << live_said << first.Logs();
  const std::map<std::string, Tensor> now = ReadSafetensors(ReadFile(live));
  EXPECT_EQ(now.size(), 4u) << live_said;  // two dense layers' weight and bias
  for (const auto& [name, t] : now) EXPECT_FALSE(t.values.empty()) << name;

  const std::string said =
      Psctl({"drain", "--scheduler=" + first.scheduler_address(), "--json"}, &code);
  ASSERT_EQ(code, 0) << said << first.Logs();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(said, m, std::regex("\"clock\": ([0-9]+)"))) << said;
  const int64_t clock = std::stoll(m[1]);
  EXPECT_GT(clock, 13);  // after the live export's checkpoint
  EXPECT_LT(clock, 300);
  absl::StatusOr<int> exit = first.WaitAll(absl::Seconds(120));
  ASSERT_TRUE(exit.ok()) << exit.status() << first.Logs();
  EXPECT_EQ(*exit, 0) << first.Logs();
  absl::StatusOr<ClusterStatus> end = first.FinalStatus();
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->job_state(), DONE) << end->message();
  EXPECT_EQ(end->manifest_clock(), clock);
  EXPECT_TRUE(end->draining());
  for (const MemberStatus& w : end->members()) {
    if (w.role() == WORKER) {
      EXPECT_EQ(w.clock(), clock) << "worker " << w.id();
    }
  }

  // The export of that checkpoint: the weights both workers read at its clock.
  // (The checkpoint directory holds the job it is of: no --job needed.)
  ExpectTheExportIsTheWorkersWeights(first, dir);

  // Started again on the directory, the job resumes at the drained clock.
  Cluster again("drain_resume");
  options.worker_flags = {{}, {}};
  ASSERT_TRUE(again.Start(options).ok()) << again.Logs();
  exit = again.WaitAll(absl::Seconds(120));
  ASSERT_TRUE(exit.ok()) << exit.status() << again.Logs();
  EXPECT_EQ(*exit, 0) << again.Logs();
  end = again.FinalStatus();
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->start_clock(), clock);
  EXPECT_EQ(end->job_state(), DONE);
  for (const MemberStatus& w : end->members()) {
    if (w.role() == WORKER) {
      EXPECT_EQ(w.clock(), 300) << "worker " << w.id();
    }
  }
}

TEST(DrainTest, WithoutCheckpointsDrainIsRefusedAndStopEndsTheJob) {
  Cluster cluster("stop");
  ClusterOptions options;
  options.job_text = SmallJob("batch_size: 32\nclocks: 300\n");
  options.worker_flags = {{"--straggler=fixed:10"}};
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.Logs();
  ASSERT_TRUE(WaitForClock(cluster.scheduler_address(), 3, 1)) << cluster.Logs();
  int code = 0;
  std::string said = Psctl({"drain", "--scheduler=" + cluster.scheduler_address()}, &code);
  EXPECT_EQ(code, 1) << said;
  EXPECT_NE(said.find("writes no checkpoints"), std::string::npos) << said;
  said = Psctl({"stop", "--scheduler=" + cluster.scheduler_address()}, &code);
  EXPECT_EQ(code, 0) << said;
  absl::StatusOr<int> exit = cluster.WaitAll(absl::Seconds(60));
  ASSERT_TRUE(exit.ok()) << exit.status() << cluster.Logs();
  EXPECT_EQ(*exit, 1);  // aborted by the operator
  absl::StatusOr<ClusterStatus> end = cluster.FinalStatus();
  ASSERT_TRUE(end.ok());
  EXPECT_EQ(end->job_state(), ABORTED);
}

TEST(PsctlBadInputTest, ClearMessagesAndNonZeroExits) {
  int code = 0;
  // Nothing listens on port 1.
  std::string said = Psctl({"status", "--scheduler=127.0.0.1:1", "--timeout_s=2"}, &code);
  EXPECT_EQ(code, 1) << said;
  EXPECT_NE(said.find("127.0.0.1:1"), std::string::npos) << said;
  said = Psctl({"frobnicate", "--scheduler=127.0.0.1:1"}, &code);
  EXPECT_EQ(code, 2) << said;
  EXPECT_NE(said.find("unknown command 'frobnicate'"), std::string::npos) << said;
  said = Psctl({"status"}, &code);
  EXPECT_EQ(code, 2) << said;
  said = Psctl({"status", "--timeout_s=soon", "--scheduler=127.0.0.1:1"}, &code);
  EXPECT_NE(code, 0) << said;
  EXPECT_NE(said.find("timeout_s"), std::string::npos) << said;
  said = Psctl({"status", "--no_such_flag=1"}, &code);
  EXPECT_NE(code, 0) << said;
  EXPECT_NE(said.find("no_such_flag"), std::string::npos) << said;
  said = Psctl({"export", "--out=/tmp/x.safetensors"}, &code);
  EXPECT_EQ(code, 2) << said;
  said = Psctl({"plot", "--run_dir=/nonexistent", "--out=/tmp/x.png"}, &code);
  EXPECT_EQ(code, 1) << said;
  EXPECT_NE(said.find("/nonexistent/curves.jsonl"), std::string::npos) << said;
}

}  // namespace
}  // namespace testing
}  // namespace pstrain
