// BSP exactness through the real daemons: W workers with batch b each train
// exactly like one worker with batch W*b over the same samples.
#include <algorithm>
#include <cmath>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "proto/tensor.pb.h"
#include "tests/cluster.h"
#include "tests/test_jobs.h"

namespace pstrain {
namespace testing {
namespace {

// Trains the small job on `workers` workers and `servers` servers; returns
// worker 0's final weights, flattened.
std::vector<float> Train(const std::string& name, int workers, const std::string& extra,
                         int servers = 2, const std::vector<std::string>& worker_flags = {}) {
  Cluster cluster(name);
  ClusterOptions options;
  options.job_text = SmallJob(extra);
  options.servers = servers;
  options.workers = workers;
  options.worker_flags.assign(workers, worker_flags);
  EXPECT_TRUE(cluster.Start(options).ok());
  absl::StatusOr<int> code = cluster.WaitAll(absl::Seconds(120));
  EXPECT_TRUE(code.ok()) << code.status() << cluster.Logs();
  EXPECT_EQ(code.value_or(-1), 0) << cluster.Logs();
  TensorSet set;
  std::ifstream in(cluster.worker_weights(0), std::ios::binary);
  EXPECT_TRUE(set.ParseFromIstream(&in)) << "no weights from worker 0\n" << cluster.Logs();
  std::vector<float> flat;
  for (const NamedTensor& t : set.tensors())
    flat.insert(flat.end(), t.values().begin(), t.values().end());
  EXPECT_EQ(set.clock(), 20);
  return flat;
}

double RelativeDifference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

// 20 BSP clocks of batch 64 under Adam (the overlap tests' job).
constexpr char kAdamJob[] =
    "consistency: BSP\nbatch_size: 64\nclocks: 20\n"
    "optimizer { type: ADAM learning_rate: 0.01 }\n";

class BspExactnessTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BspExactnessTest, TwoWorkersOfBatchBEqualOneWorkerOfBatchTwoB) {
  const std::string opt = GetParam();
  const std::string job = absl::StrCat("consistency: BSP\nbatch_size: 64\nclocks: 20\n", opt);
  const std::vector<float> one = Train("bsp1", 1, job);
  const std::vector<float> two = Train("bsp2", 2, job);
  ASSERT_EQ(one.size(), two.size());
  ASSERT_GT(one.size(), 0u);
  const double rel = RelativeDifference(two, one);
  std::printf("%s: relative difference 2 workers vs 1 worker: %.3g\n", opt.c_str(), rel);
  EXPECT_LE(rel, 1e-5);

  // The check has teeth: ASP (each push applied alone) lands elsewhere.
  const std::string asp = absl::StrCat("consistency: ASP\nbatch_size: 64\nclocks: 20\n", opt);
  const std::vector<float> asp_two = Train("asp2", 2, asp);
  const double asp_rel = RelativeDifference(asp_two, one);
  std::printf("%s: relative difference ASP 2 workers vs 1 worker: %.3g\n", opt.c_str(), asp_rel);
  EXPECT_GT(asp_rel, 1e-3);
}

// Clipping by the global norm: the round's mean gradient over every
// parameter on every server is what is clipped, so 2 workers on 2 servers
// equal 1 worker on 1 server. Clipping per server (or per push) would not.
TEST(BspClippingTest, GlobalNormAcrossServers) {
  const std::string job =
      "consistency: BSP\nbatch_size: 64\nclocks: 20\n"
      "optimizer { type: SGD learning_rate: 0.5 clip_norm: 0.05 }";
  const std::vector<float> one = Train("clip1", 1, job, /*servers=*/1);
  const std::vector<float> two = Train("clip2", 2, job, /*servers=*/3);
  const double rel = RelativeDifference(two, one);
  std::printf("clip_norm 0.05: relative difference 2 workers x 3 servers vs 1 x 1: %.3g\n", rel);
  EXPECT_LE(rel, 1e-5);
  // The clip is active: without it the weights land elsewhere.
  const std::vector<float> unclipped = Train("noclip", 1,
                                             "consistency: BSP\nbatch_size: 64\nclocks: 20\n"
                                             "optimizer { type: SGD learning_rate: 0.5 }",
                                             1);
  const double clip_effect = RelativeDifference(unclipped, one);
  std::printf("clipped vs unclipped: relative difference %.3g\n", clip_effect);
  EXPECT_GT(clip_effect, 1e-2);
}

// Gradient accumulation: k micro-batches of b give the step of one batch of
// k*b (only the float summation order differs).
TEST(AccumulationTest, MicroBatchesEqualOneBatch) {
  const std::string job =
      "consistency: BSP\nbatch_size: 64\nclocks: 20\noptimizer { type: SGD learning_rate: 0.5 }\n";
  const std::vector<float> one = Train("accum1", 1, job);
  const std::vector<float> four = Train("accum4", 1, job + "micro_batches: 4\n");
  const std::vector<float> two_by_two = Train("accum2x2", 2, job + "micro_batches: 2\n");
  ASSERT_EQ(one.size(), four.size());
  ASSERT_EQ(one.size(), two_by_two.size());
  double max_four = 0, max_two = 0;
  for (size_t i = 0; i < one.size(); ++i) {
    max_four = std::max(max_four, std::abs(double(four[i]) - one[i]));
    max_two = std::max(max_two, std::abs(double(two_by_two[i]) - one[i]));
  }
  std::printf("micro_batches 4 vs 1: max |w - w'| %.3g; 2 workers x micro_batches 2 vs 1: %.3g\n",
              max_four, max_two);
  EXPECT_LE(max_four, 1e-5);
  EXPECT_LE(max_two, 1e-5);
}

// Overlap: each layer's gradients pushed while the backward goes on (on a
// thread of their own) make the same BSP step as one push after it.
TEST(OverlapTest, LayerPushesDuringTheBackwardGiveTheSameWeights) {
  const std::string job = kAdamJob;
  const std::vector<float> one = Train("overlap1", 1, job, 2, {"--overlap=off"});
  const std::vector<float> two = Train("overlap2", 2, job, 2, {"--overlap=on"});
  const double rel = RelativeDifference(two, one);
  std::printf("overlap on, 2 workers vs overlap off, 1 worker: relative difference %.3g\n", rel);
  EXPECT_LE(rel, 1e-5);
}

// Under BSP with overlap the step starts while its weights land, each
// layer's forward waiting for that layer's (worker/weight_arrivals.h): the
// weights are bit-identical to those of the read of the whole model before
// the step, with one worker and with two.
TEST(OverlapTest, LayeredWeightsAreBitIdenticalToAWholeRead) {
  const std::string job = kAdamJob;
  for (int workers : {1, 2}) {
    const std::vector<float> whole =
        Train(absl::StrCat("whole", workers), workers, job, 2, {"--overlap=off"});
    const std::vector<float> layered =
        Train(absl::StrCat("layered", workers), workers, job, 2, {"--overlap=on"});
    ASSERT_GT(whole.size(), 0u);
    EXPECT_EQ(layered, whole) << workers << " workers";
  }
}

// The test of the per-layer waits: the second layer's weights (parameter
// 2) land 100 ms after the rest of every pull, long after the forward has
// passed the first layer. A forward that read them without waiting would
// compute with the clock before's and end elsewhere.
TEST(OverlapTest, AForwardWaitsForTheLayerWhoseWeightsComeLast) {
  const std::string job = kAdamJob;
  const std::vector<float> whole = Train("whole_read", 1, job, 2, {"--overlap=off"});
  const std::vector<float> late =
      Train("late_layer", 1, job, 2, {"--overlap=on", "--debug_delay_pull_param=2"});
  ASSERT_GT(whole.size(), 0u);
  EXPECT_EQ(late, whole);
}

// ps_worker --standalone (the servers' store and optimizer in the worker's
// process; bench/train_bench's ceiling) trains exactly like one worker on
// one server: bit-identical weights, with Adam and with clipping by the
// global norm (the store's clipping thread).
TEST(StandaloneTest, AloneEqualsOneWorkerOnOneServer) {
  for (const std::string opt : {"optimizer { type: ADAM learning_rate: 0.01 }",
                                "optimizer { type: SGD learning_rate: 0.5 clip_norm: 0.05 }"}) {
    const std::string job = absl::StrCat("consistency: BSP\nbatch_size: 64\nclocks: 20\n", opt);
    const std::vector<float> cluster = Train("alone_ref", 1, job, /*servers=*/1);
    const std::string dir = NewTempDir("alone");
    WriteFile(dir + "/job.pbtxt", SmallJob(job));
    std::string log;
    const absl::StatusOr<int> code =
        RunCommand({BinaryPath("worker/ps_worker"), "--standalone", "--job=" + dir + "/job.pbtxt",
                    "--weights_out=" + dir + "/weights", "--status_file=" + dir + "/status.json"},
                   &log, absl::Seconds(60), "alone_worker");
    ASSERT_TRUE(code.ok()) << code.status();
    ASSERT_EQ(*code, 0) << log;
    std::vector<float> alone;
    const TensorSet weights = ReadWeights(dir + "/weights");
    for (const NamedTensor& t : weights.tensors()) {
      alone.insert(alone.end(), t.values().begin(), t.values().end());
    }
    ASSERT_EQ(alone.size(), cluster.size()) << log;
    EXPECT_EQ(alone, cluster) << opt;
    // Its Status counts the clocks after the first, and no calls.
    MemberStatus st;
    ASSERT_TRUE(
        google::protobuf::util::JsonStringToMessage(ReadFile(dir + "/status.json"), &st).ok());
    EXPECT_EQ(st.state(), FINISHED);
    EXPECT_EQ(st.worker().clocks_trained(), 19);
    EXPECT_GT(st.worker().train_s(), 0);
    EXPECT_EQ(st.worker().run_split().rpcs(), 0);
    EXPECT_GT(st.worker().run_split().bytes(), 0);
  }
  // A pipelined job cannot run alone: exit 2 before training.
  const std::string dir = NewTempDir("alone_pipeline");
  WriteFile(dir + "/job.pbtxt",
            SmallJob("batch_size: 64\nclocks: 2\nnum_workers: 2\npipeline_stages: 2"));
  std::string log;
  const absl::StatusOr<int> code =
      RunCommand({BinaryPath("worker/ps_worker"), "--standalone", "--job=" + dir + "/job.pbtxt"},
                 &log, absl::Seconds(30), "alone_pipeline_worker");
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 2) << log;
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, BspExactnessTest,
    ::testing::Values("optimizer { type: ADAM learning_rate: 0.01 }",
                      "optimizer { type: MOMENTUM learning_rate: 0.05 momentum: 0.9 }"));

}  // namespace
}  // namespace testing
}  // namespace pstrain
