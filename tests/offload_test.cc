// Servers with --offload_dir through real daemons: the quick start's model
// trains to bit-identical weights with a quarter of each server's state in
// memory, the servers' anonymous memory stays under the budget plus a fixed
// overhead, and an unusable offload directory (missing, or a disk that is
// too small) fails the server with a clear message and ends the job.
#include <sys/mount.h>
#include <csignal>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/cluster.h"
#include "tests/memory_limit.h"

namespace pstrain {
namespace testing {
namespace {

// The quick start's job (deploy/jobs/mlp_fashion_mnist.pbtxt) in 64 KiB
// chunks (a chunk's Adam slab is then 256 KiB, so that a quarter of a
// server's 2.1 MB holds 2 of them; the quick start's own 256 KiB chunks make
// 1 MiB slabs, more than a quarter) and 1 epoch.
std::string QuickStartJob() {
  return R"pb(
    name: "offload"
    model {
      input_dim: 784
      layers { type: DENSE name: "fc1" units: 256 }
      layers { type: RELU }
      layers { type: DENSE name: "fc2" units: 256 }
      layers { type: RELU }
      layers { type: DENSE name: "fc3" units: 10 }
      layers { type: SOFTMAX_XENT }
    }
    data { dataset: FASHION_MNIST path: "/usr/share/datasets/fashion-mnist" }
    optimizer { type: ADAM learning_rate: 0.001 }
    consistency: BSP
    batch_size: 128
    epochs: 1
    seed: 42
    chunk_bytes: 65536
    num_servers: 2
    num_workers: 2
  )pb";
}

// 269,578 parameters over 2 servers, 16 bytes each (weights, Adam's two
// moments, the BSP round's sum): a server holds about 2.15 MB; the budget
// is a quarter of that.
constexpr int64_t kBudget = 2 * 262144 + 8192;

// Anonymous resident memory of process `pid` (RssAnon), bytes; -1 if gone.
int64_t RssAnon(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("RssAnon:", 0) != 0) continue;
    std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
    return parts.size() >= 2 ? std::stoll(parts[1]) * 1024 : -1;
  }
  return -1;
}

struct Trained {
  int code = -1;
  TensorSet weights;
  int64_t peak_rss_anon = 0;  // the larger server's, sampled every 20 ms
  ClusterStatus status;
  std::string logs;  // when the job did not end DONE
};

// The quick start's job on 2 servers and 2 workers.
ClusterOptions QuickStart(const std::vector<std::string>& server_flags) {
  ClusterOptions options;
  options.job_text = QuickStartJob();
  options.servers = 2;
  options.workers = 2;
  options.server_flags = server_flags;
  return options;
}

Trained Train(const std::string& name, ClusterOptions options) {
  Cluster cluster(name);
  options.scheduler_flags.push_back("--linger_ms=3000");
  Trained run;
  if (const absl::Status st = cluster.Start(options); !st.ok()) {
    run.logs = absl::StrCat(st.message(), "\n", cluster.Logs());
    return run;
  }
  std::atomic<bool> done{false};
  std::thread sampler([&] {
    while (!done) {
      for (Process& s : cluster.servers()) {
        run.peak_rss_anon = std::max(run.peak_rss_anon, RssAnon(s.pid()));
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  });
  // The servers' Status while they run (the last one before the job ended).
  absl::StatusOr<ClusterStatus> last;
  int unanswered = 0;  // in a row
  for (int i = 0; i < 3000; ++i) {
    absl::StatusOr<ClusterStatus> st = SchedulerStatus(cluster.scheduler_address());
    // (An answer that did not come, under load, is asked again: breaking
    // at the first kept a Status from long before the end.)
    if (st.ok() && (st->job_state() == DONE || st->job_state() == ABORTED)) break;
    unanswered = st.ok() ? 0 : unanswered + 1;
    if (unanswered > 100) break;  // the scheduler is gone
    if (st.ok()) last = st;
    absl::SleepFor(absl::Milliseconds(50));
  }
  run.code = cluster.WaitAll(absl::Seconds(180)).value_or(-1);
  done = true;
  sampler.join();
  if (last.ok()) run.status = *last;
  run.weights = ReadWeights(cluster.worker_weights(0));
  if (run.code != 0) run.logs = cluster.Logs();
  return run;
}

// The in-memory run (once per test binary).
const Trained& InMemory() {
  static const Trained* run = new Trained(Train("offload_memory", QuickStart({})));
  return *run;
}

TEST(OffloadTest, OffloadedServersTrainTheQuickStartModelBitIdentically) {
  const Trained& memory = InMemory();
  const std::string dir = NewTempDir("offload_dir");
  const Trained offloaded = Train(
      "offload_disk", QuickStart({"--offload_dir=" + dir, absl::StrCat("--memory_budget=", kBudget)}));
  ASSERT_EQ(memory.code, 0) << memory.logs;
  ASSERT_EQ(offloaded.code, 0) << offloaded.logs;
  ASSERT_GT(memory.weights.tensors_size(), 0);
  EXPECT_EQ(memory.weights.SerializeAsString(), offloaded.weights.SerializeAsString());
  // Status while it ran: at most the budget resident, and the disk used.
  int servers = 0;
  for (const MemberStatus& m : offloaded.status.members()) {
    if (m.role() != SERVER) continue;
    ++servers;
    EXPECT_LE(m.server().offload().resident_bytes(), kBudget);
    EXPECT_GT(m.server().offload().disk_bytes(), kBudget);
    EXPECT_GT(m.server().offload().read_bytes(), 0);
    EXPECT_GT(m.server().offload().write_bytes(), 0);
  }
  EXPECT_EQ(servers, 2);
  // The fixed overhead (gRPC, threads, buffers) is what an in-memory server
  // holds besides its state; offloaded, the state counts at most the budget.
  constexpr int64_t kOverhead = 64 << 20;
  std::printf("peak RssAnon: in memory %.1f MB, offloaded %.1f MB (budget %.2f MB)\n",
              memory.peak_rss_anon / 1e6, offloaded.peak_rss_anon / 1e6, kBudget / 1e6);
  EXPECT_LE(offloaded.peak_rss_anon, kBudget + kOverhead);
}

// One server whose state is 4.5 times its budget (issue 24): a
// 784-3072-3072-10 MLP (11.9M parameters; Adam and BSP: 16 bytes each,
// 190 MB on the one server) in 1 MiB chunks, 1 worker, 8 clocks, on a
// synthetic set of Fashion-MNIST's shape (no data to load, a short test).
std::string LargeMlpJob() {
  return R"pb(
    name: "offload-large"
    model {
      input_dim: 784
      layers { type: DENSE name: "fc1" units: 3072 }
      layers { type: RELU }
      layers { type: DENSE name: "fc2" units: 3072 }
      layers { type: RELU }
      layers { type: DENSE name: "fc3" units: 10 }
      layers { type: SOFTMAX_XENT }
    }
    data {
      dataset: SYNTHETIC
      synthetic_dim: 784
      synthetic_classes: 10
      synthetic_train_size: 2048
      synthetic_test_size: 256
    }
    optimizer { type: ADAM learning_rate: 0.0001 }
    consistency: BSP
    batch_size: 32
    clocks: 8
    seed: 11
    num_servers: 1
    num_workers: 1
  )pb";
}

constexpr int64_t kLargeBudget = int64_t{40} << 20;
// What the process may hold besides its budget: code, gRPC's and the
// threads' own memory -- nothing that grows with the model or the traffic.
constexpr int64_t kFixedOverhead = int64_t{64} << 20;

ClusterOptions LargeMlp(const std::vector<std::string>& server_flags,
                        const MemoryLimit* limit) {
  ClusterOptions options;
  options.job_text = LargeMlpJob();
  options.servers = 1;
  options.workers = 1;
  options.server_flags = server_flags;
  if (limit != nullptr) options.server_prefix = limit->prefix();
  return options;
}

// The limit is real: the same server holding its state in memory (190 MB)
// is stopped by it (killed, or its allocation fails), and the job ends.
TEST(OffloadTest, AServerInMemoryIsStoppedByTheLimit) {
  absl::StatusOr<MemoryLimit> limit =
      MemoryLimit::Make("in_memory", kLargeBudget + kFixedOverhead, /*allow_rlimit=*/true);
  ASSERT_TRUE(limit.ok()) << limit.status();
  const Trained run = Train("offload_large_unlimited", LargeMlp({}, &*limit));
  std::printf("%s: in memory, the job ended with %d\n", limit->Describe().c_str(), run.code);
  EXPECT_NE(run.code, 0);
  if (limit->kind() != MemoryLimit::kRlimitData) {
    EXPECT_GE(limit->OomKills(), 1);
  }
}

// Offloaded, inside a memory limit of its budget + 64 MiB: the job ends
// DONE with the in-memory run's weights, the kernel killed nothing, and
// the server's RssAnon never passed the budget + 64 MiB.
TEST(OffloadTest, AnOffloadedServerTrainsInsideItsBudgetPlusAFixedOverhead) {
  const Trained memory = Train("offload_large_memory", LargeMlp({}, nullptr));
  ASSERT_EQ(memory.code, 0) << memory.logs;
  absl::StatusOr<MemoryLimit> limit =
      MemoryLimit::Make("offloaded", kLargeBudget + kFixedOverhead, /*allow_rlimit=*/true);
  ASSERT_TRUE(limit.ok()) << limit.status();
  const std::string dir = NewTempDir("offload_large");
  const Trained offloaded = Train(
      "offload_large_disk",
      LargeMlp({"--offload_dir=" + dir, absl::StrCat("--memory_budget=", kLargeBudget)}, &*limit));
  std::printf("%s: peak RssAnon in memory %.1f MB, offloaded %.1f MB (budget %.1f MB); "
              "cgroup peak %.1f MB\n",
              limit->Describe().c_str(), memory.peak_rss_anon / 1e6,
              offloaded.peak_rss_anon / 1e6, kLargeBudget / 1e6, limit->PeakBytes() / 1e6);
  ASSERT_EQ(offloaded.code, 0) << offloaded.logs;
  EXPECT_EQ(limit->OomKills(), 0);
  ASSERT_GT(memory.weights.tensors_size(), 0);
  EXPECT_EQ(memory.weights.SerializeAsString(), offloaded.weights.SerializeAsString());
  const MemberStatus server = MemberOf(offloaded.status, SERVER, 0);
  EXPECT_GE(server.server().offload().disk_bytes(),
            4 * kLargeBudget);  // the state is >= 4x the budget
  EXPECT_LE(server.server().offload().resident_bytes(), kLargeBudget);
  EXPECT_GT(memory.peak_rss_anon, 4 * kLargeBudget);
  EXPECT_LE(offloaded.peak_rss_anon, kLargeBudget + kFixedOverhead);
}

// Checkpoints and a rollback with offloaded servers: server 1 killed after
// clock 150 and replaced (offloaded too); the cluster rolls back to the
// checkpoint and ends with the in-memory run's weights.
TEST(OffloadTest, AnOffloadedServerIsCheckpointedAndRestored) {
  const Trained& memory = InMemory();
  ASSERT_EQ(memory.code, 0) << memory.logs;
  Cluster cluster("offload_restart");
  const std::string dir = NewTempDir("offload_dir2");
  const std::vector<std::string> offload = {"--offload_dir=" + dir,
                                            absl::StrCat("--memory_budget=", kBudget)};
  ClusterOptions options;
  options.job_text = QuickStartJob();
  options.servers = 2;
  options.workers = 2;
  options.server_flags = offload;
  options.scheduler_flags = {"--checkpoint_dir=" + cluster.dir() + "/ckpt",
                             "--checkpoint_every=50", "--heartbeat_timeout_ms=1500"};
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.Logs();
  for (int i = 0; i < 3000; ++i) {
    absl::StatusOr<ClusterStatus> st = SchedulerStatus(cluster.scheduler_address());
    if (st.ok() && st->members_size() == 4 && MemberOf(*st, WORKER, 0).clock() >= 160) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  const int victim = cluster.ServerProcess(1);
  ASSERT_GE(victim, 0);
  cluster.servers()[victim].Kill(SIGKILL);
  std::vector<std::string> replacement = offload;
  replacement.push_back("--id=1");
  ASSERT_TRUE(cluster.AddServer(replacement).ok());
  absl::StatusOr<int> code = cluster.WaitAll(absl::Seconds(180));
  ASSERT_TRUE(code.ok() && *code == 0) << cluster.Logs();
  absl::StatusOr<ClusterStatus> st = cluster.FinalStatus();
  ASSERT_TRUE(st.ok());
  ASSERT_EQ(st->rollbacks_size(), 1);
  EXPECT_GT(st->rollbacks(0).to_clock(), 0);
  EXPECT_EQ(ReadWeights(cluster.worker_weights(0)).SerializeAsString(),
            memory.weights.SerializeAsString());
}

// The GPT job (deploy/jobs/gpt_fortunes.pbtxt) shortened to 30 clocks.
std::string GptJob() {
  std::string job = ReadFile("deploy/jobs/gpt_fortunes.pbtxt");
  const std::string full = "clocks: 600";
  const size_t at = job.find(full);
  if (at != std::string::npos) job.replace(at, full.size(), "clocks: 30");
  return job;
}

// Trains GptJob() with the workers' `flags`; the merged weights of worker 0
// and the largest peak device memory a worker reported.
Trained TrainGpt(const std::string& name, const std::vector<std::string>& flags) {
  Cluster cluster(name);
  ClusterOptions options;
  options.job_text = GptJob();
  options.servers = 2;
  options.workers = 2;
  options.worker_flags = {flags, flags};
  Trained run;
  EXPECT_TRUE(cluster.Start(options).ok()) << cluster.Logs();
  run.code = cluster.WaitAll(absl::Seconds(300)).value_or(-1);
  EXPECT_EQ(run.code, 0) << cluster.Logs();
  run.weights = ReadWeights(cluster.worker_weights(0));
  absl::StatusOr<ClusterStatus> st = cluster.FinalStatus();
  if (st.ok()) run.status = *st;
  for (const MemberStatus& m : run.status.members()) {
    if (m.role() == WORKER)
      run.peak_rss_anon = std::max(run.peak_rss_anon, m.worker().peak_device_bytes());
  }
  return run;
}

// A worker whose device memory budget is half of what it holds without
// one (the GPT's weights, gradients and activations) trains the GPT job to
// the same weights, and never holds more than the budget (the CPU backend
// refuses more).
TEST(OffloadTest, AWorkerUnderHalfItsMemoryTrainsTheGptJobToTheSameWeights) {
  const Trained free = TrainGpt("gpt_free", {});
  ASSERT_EQ(free.code, 0);
  const int64_t budget = free.peak_rss_anon / 2;  // peak device bytes, as Status says
  ASSERT_GT(budget, 0);
  const Trained windowed =
      TrainGpt("gpt_budget", {absl::StrCat("--device_memory_budget=", budget)});
  ASSERT_EQ(windowed.code, 0);
  std::printf("peak device memory: %lld bytes without a budget, %lld under %lld\n",
              static_cast<long long>(free.peak_rss_anon),
              static_cast<long long>(windowed.peak_rss_anon), static_cast<long long>(budget));
  EXPECT_LE(windowed.peak_rss_anon, budget);
  ASSERT_GT(free.weights.tensors_size(), 0);
  const double relative = MaxDifference(free.weights, windowed.weights) / MaxMagnitude(free.weights);
  std::printf("final weights: max |w - w_free| / max |w| = %.3g\n", relative);
  EXPECT_LE(relative, 1e-5);
}

// A budget below what the GPT's smallest step needs is refused before
// training, naming the minimum; the job ends.
TEST(OffloadTest, AWorkerBudgetBelowTheMinimumIsRefusedNamingIt) {
  Cluster cluster("gpt_too_small");
  ClusterOptions options;
  options.job_text = GptJob();
  options.servers = 1;
  options.workers = 2;
  options.worker_flags = {{"--device_memory_budget=100000"}, {}};
  options.scheduler_flags = {"--linger_ms=2000"};
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.Logs();
  absl::StatusOr<int> code = cluster.WaitAll(absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << cluster.Logs();
  EXPECT_EQ(*code, 1);
  absl::StatusOr<ClusterStatus> st = cluster.FinalStatus();
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->job_state(), ABORTED);
  EXPECT_NE(st->message().find("is below this stage's minimum of"), std::string::npos)
      << st->message();
}

// The server's exit and its FAILED message as the scheduler reports it.
void ExpectServerFails(const std::string& name, const std::string& dir, const std::string& what) {
  Cluster cluster(name);
  ClusterOptions options;
  options.job_text = QuickStartJob();
  options.servers = 2;
  options.workers = 2;
  options.server_flags = {"--offload_dir=" + dir, absl::StrCat("--memory_budget=", kBudget)};
  options.scheduler_flags = {"--linger_ms=2000"};
  // The job ends as the servers start: a worker slow to start (a loaded
  // machine) may find the scheduler gone, and waits for it no longer than
  // this before it exits.
  options.worker_flags = {{"--connect_timeout_s=10"}, {"--connect_timeout_s=10"}};
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.Logs();
  absl::StatusOr<int> code = cluster.WaitAll(absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << cluster.Logs();
  EXPECT_EQ(*code, 1);  // the job was aborted: a server failed, no checkpoints
  absl::StatusOr<ClusterStatus> st = cluster.FinalStatus();
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->job_state(), ABORTED);
  EXPECT_NE(st->message().find(what), std::string::npos) << st->message();
  bool failed = false;
  for (const MemberStatus& m : st->members()) failed |= m.role() == SERVER && m.state() == FAILED;
  EXPECT_TRUE(failed);
}

TEST(OffloadTest, AMissingOffloadDirectoryFailsTheServer) {
  ExpectServerFails("offload_missing", "/nonexistent/offload", "/nonexistent/offload");
}

TEST(OffloadTest, AnOffloadDirectoryTooSmallFailsTheServerAndLeavesNothing) {
  // A 256 KiB tmpfs: each server's 2.1 MB of chunk state cannot be made there.
  const std::string dir = NewTempDir("offload_small");
  if (geteuid() != 0 || mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=256k") != 0) {
    GTEST_SKIP() << "cannot mount a small tmpfs here (needs root outside a sandbox)";
  }
  ExpectServerFails("offload_full", dir, "No space left on device");
  // Nothing half-written: the temporary files are gone.
  std::string listing;
  EXPECT_TRUE(RunCommand({"/bin/ls", "-A", dir}, &listing, absl::Seconds(5), "ls").ok());
  umount(dir.c_str());
  EXPECT_EQ(listing, "");
}

}  // namespace
}  // namespace testing
}  // namespace pstrain
