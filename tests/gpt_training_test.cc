// The byte-level GPT on a real local cluster (scheduler, server, two workers
// over gRPC) on Debian's `fortunes` corpus, and the GPT's bad input.
#include <cstdio>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/cluster.h"

namespace pstrain {
namespace testing {
namespace {

constexpr char kCorpus[] = "/usr/share/games/fortunes";

std::string GptJob(const std::string& gpt, const std::string& rest = "") {
  return "model { kind: GPT gpt { " + gpt + " } }\n" + "data { dataset: TEXT path: \"" + kCorpus +
         "\" }\n" + rest;
}

// Worker 0 as the scheduler's final Status reports it.
MemberStatus FinalWorker0(const Cluster& cluster) {
  absl::StatusOr<ClusterStatus> st = cluster.FinalStatus();
  return st.ok() ? MemberOf(*st, WORKER, 0) : MemberStatus();
}

TEST(GptTrainingTest, ValidationLossFallsWellBelowTheUnigramEntropy) {
  Cluster cluster("gpt");
  ClusterOptions options;
  options.job_text = GptJob(
      "layers: 2 heads: 4 width: 64 context: 32",
      "optimizer { type: ADAMW learning_rate: 0.005 weight_decay: 0.01 "
      "schedule { type: WARMUP_COSINE warmup_clocks: 50 min_lr: 0.0005 } }\n"
      "batch_size: 16\nclocks: 1200\nseed: 7\nnum_servers: 1\nnum_workers: 2\nlog_every: 200\n");
  options.servers = 1;
  options.workers = 2;
  // Each block's gradients pushed while the backward goes on.
  options.worker_flags = {{"--overlap=on"}, {"--overlap=on"}};
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.Logs();
  absl::StatusOr<int> code = cluster.WaitAll(absl::Seconds(240));
  ASSERT_TRUE(code.ok()) << code.status() << cluster.Logs();
  ASSERT_EQ(*code, 0) << cluster.Logs();
  const MemberStatus w = FinalWorker0(cluster);
  EXPECT_EQ(w.state(), FINISHED);
  const double loss = w.worker().validation_loss();
  const double entropy = w.worker().unigram_entropy();
  std::printf("validation loss %.4f nats/byte, unigram entropy %.4f nats/byte\n", loss, entropy);
  ASSERT_GT(loss, 0) << cluster.Logs();
  ASSERT_GT(entropy, 3.0);  // English bytes: about 4.5-4.8 bits
  // "Well below": at least 0.8 nats (1.15 bits) per byte under the entropy.
  EXPECT_LT(loss, entropy - 0.8);
}

// bf16 compute (emulated exactly on the CPU: inputs rounded, fp32
// accumulation) still trains; the servers keep fp32.
TEST(GptTrainingTest, Bf16ComputeTrains) {
  Cluster cluster("gptbf16");
  ClusterOptions options;
  options.job_text = GptJob(
      "layers: 2 heads: 4 width: 64 context: 32",
      "optimizer { type: ADAMW learning_rate: 0.005 weight_decay: 0.01 "
      "schedule { type: WARMUP_COSINE warmup_clocks: 50 min_lr: 0.0005 } }\n"
      "batch_size: 16\nclocks: 600\nseed: 7\nnum_servers: 1\nnum_workers: 1\nlog_every: 200\n");
  options.servers = 1;
  options.workers = 1;
  options.worker_flags = {{"--compute_dtype=bf16"}};
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.Logs();
  absl::StatusOr<int> code = cluster.WaitAll(absl::Seconds(240));
  ASSERT_TRUE(code.ok()) << code.status() << cluster.Logs();
  ASSERT_EQ(*code, 0) << cluster.Logs();
  const MemberStatus w = FinalWorker0(cluster);
  EXPECT_EQ(w.state(), FINISHED);
  EXPECT_EQ(w.worker().compute_dtype(), "bf16");
  // The Status names the attention's kernels: the CPU's own here, on a
  // GPU cuDNN's or the CUDA backend's own.
  EXPECT_TRUE(w.worker().attention_path().rfind("own", 0) == 0 ||
              w.worker().attention_path().rfind("cudnn", 0) == 0)
      << w.worker().attention_path();
  const double loss = w.worker().validation_loss();
  const double entropy = w.worker().unigram_entropy();
  std::printf("bf16: validation loss %.4f nats/byte, unigram entropy %.4f nats/byte\n", loss,
              entropy);
  ASSERT_GT(loss, 0) << cluster.Logs();
  EXPECT_LT(loss, entropy - 0.6);
}

TEST(GptTrainingTest, ComputeDtypesTheDeviceCannotDoAreRefused) {
  for (const char* dtype : {"fp16", "fp8"}) {
    std::string out;
    const int code = RunCommand({BinaryPath("worker/ps_worker"), "--scheduler=127.0.0.1:1",
                                 "--device=cpu", std::string("--compute_dtype=") + dtype},
                                &out, absl::Seconds(20), "worker")
                         .value_or(-1);
    EXPECT_EQ(code, 2) << out;
    EXPECT_TRUE(absl::StrContains(out, std::string("--compute_dtype=") + dtype)) << out;
  }
}

// An attention library not known, TF32 on a CPU (it has no TF32 tensor
// cores) and TF32 beside a 16-bit dtype: exit 2 before joining.
TEST(GptTrainingTest, AttentionAndTf32FlagsTheWorkerCannotHonourAreRefused) {
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"--attention=flash9"}, {"--tf32"},
        {"--tf32", "--compute_dtype=bf16"}}) {
    std::vector<std::string> argv = {BinaryPath("worker/ps_worker"), "--scheduler=127.0.0.1:1",
                                      "--device=cpu"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    std::string out;
    const int code = RunCommand(argv, &out, absl::Seconds(20), "worker").value_or(-1);
    EXPECT_EQ(code, 2) << flags.back() << ": " << out;
  }
}

int RunScheduler(const std::string& job_text, std::string* output) {
  const std::string path = NewTempDir("gptjob") + "/job.pbtxt";
  WriteFile(path, job_text);
  return RunCommand({BinaryPath("scheduler/ps_scheduler"), "--job=" + path, "--listen=127.0.0.1:0"},
                    output, absl::Seconds(20), "sched")
      .value_or(-1);
}

TEST(GptTrainingTest, InconsistentShapesAndUnknownLayersAreRefusedBeforeTraining) {
  std::string out;
  EXPECT_EQ(RunScheduler(GptJob("heads: 4 width: 130", "clocks: 10\n"), &out), 2);
  EXPECT_TRUE(absl::StrContains(out, "gpt.width (130) must be a multiple of gpt.heads (4)")) << out;
  EXPECT_EQ(RunScheduler(GptJob("context: 1", "clocks: 10\n"), &out), 2);
  EXPECT_TRUE(absl::StrContains(out, "gpt.context must be in [2, 8192]")) << out;
  EXPECT_EQ(RunScheduler(GptJob("layers: 1"), &out), 2);
  EXPECT_TRUE(absl::StrContains(out, "a TEXT job needs clocks")) << out;
  EXPECT_EQ(RunScheduler("model { kind: GPT layers { type: DENSE units: 4 } }\nclocks: 10\n", &out),
            2);
  EXPECT_TRUE(absl::StrContains(out, "a GPT is described by model.gpt")) << out;
  // An unknown layer type, by name or by number.
  EXPECT_EQ(RunScheduler("model { layers { type: CONV units: 4 } }\nclocks: 10\n", &out), 2);
  EXPECT_TRUE(absl::StrContains(out, "Unknown enumeration value of \"CONV\"")) << out;
  EXPECT_EQ(RunScheduler("model { layers { type: 9 units: 4 } layers { type: SOFTMAX_XENT } }\n"
                         "clocks: 10\n",
                         &out),
            2);
  EXPECT_TRUE(absl::StrContains(out, "layer 0: unknown layer type")) << out;
}

TEST(GptTrainingTest, MissingCorpusFailsTheJobCleanly) {
  Cluster cluster("nocorpus");
  ClusterOptions options;
  options.job_text =
      "model { kind: GPT gpt { layers: 1 width: 8 heads: 2 context: 8 } }\n"
      "data { dataset: TEXT path: \"/nonexistent/corpus\" }\nclocks: 10\n";
  options.servers = 1;
  options.workers = 1;
  // The job may abort, and its scheduler exit, before the server has
  // registered (seen under load): the server then looks for a scheduler
  // that is gone until its --connect_timeout_s (60 s by default) runs out.
  options.server_flags = {"--connect_timeout_s=5"};
  ASSERT_TRUE(cluster.Start(options).ok());
  absl::StatusOr<int> code = cluster.WaitAll(absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << code.status() << cluster.Logs();
  EXPECT_EQ(*code, 1) << cluster.Logs();
  // The scheduler's final Status says which worker failed and why.
  absl::StatusOr<ClusterStatus> final_status = cluster.FinalStatus();
  ASSERT_TRUE(final_status.ok()) << final_status.status();
  EXPECT_EQ(final_status->job_state(), ABORTED);
  const MemberStatus w = MemberOf(*final_status, WORKER, 0);
  EXPECT_EQ(w.state(), FAILED);
  EXPECT_TRUE(absl::StrContains(w.message(), "/nonexistent/corpus")) << w.message();
}

}  // namespace
}  // namespace testing
}  // namespace pstrain
