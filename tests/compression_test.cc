// Compressed pushes through the real daemons (JobSpec.compression,
// docs/compression.md): each codec, with error feedback, trains the
// 16-class job to an accuracy near the dense run's while the workers push
// a fraction of the bytes, pushed and (with compression.pulls) pulled; the
// bytes are the workers' own count (MemberStatus.bytes_out and bytes_in:
// the payloads as sent and received).
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/cluster.h"
#include "tests/test_jobs.h"

namespace pstrain {
namespace testing {
namespace {

struct Outcome {
  double accuracy = -1;
  int64_t bytes_out = 0;  // worker 0's pushes
  int64_t bytes_in = 0;   // and pulls
};

// 600 BSP clocks on 2 workers and 2 servers; the 8x32 and 32x16 weights
// cut into 128-value chunks, every one of them compressed (min_numel 64),
// the biases dense.
Outcome Train(const std::string& name, const std::string& compression) {
  Cluster cluster(name);
  ClusterOptions options;
  options.job_text =
      SixteenClassJob(absl::StrCat("clocks: 600\nseed: 3\nchunk_bytes: 512\n", compression));
  options.servers = 2;
  options.workers = 2;
  EXPECT_TRUE(cluster.Start(options).ok()) << cluster.Logs();
  absl::StatusOr<int> code = cluster.WaitAll(absl::Seconds(180));
  EXPECT_TRUE(code.ok()) << code.status() << cluster.Logs();
  EXPECT_EQ(code.value_or(-1), 0) << cluster.Logs();
  absl::StatusOr<ClusterStatus> end = cluster.FinalStatus();
  EXPECT_TRUE(end.ok()) << end.status();
  if (!end.ok()) return {};
  const MemberStatus worker = MemberOf(*end, WORKER, 0);
  return {worker.worker().test_accuracy(), worker.bytes_out(), worker.bytes_in()};
}

TEST(CompressionTest, EachCodecTrainsNearDenseOnAFractionOfTheBytes) {
  const Outcome dense = Train("dense", "");
  ASSERT_GT(dense.accuracy, 0.3) << "the dense run did not learn";
  struct Case {
    const char* name;
    std::string spec;
    double most_pushed, most_pulled;  // of the dense run's bytes
  };
  const Case cases[] = {
      // 20 bytes a chunk of 128 values instead of 512; the biases dense.
      {"sign", "compression { codec: SIGN min_numel: 64 }", 0.15, 1.0},
      // 32 of 128 values kept, 8 bytes each.
      {"top_k", "compression { codec: TOP_K ratio: 0.25 min_numel: 64 }", 0.6, 1.0},
      // The pulls too: each worker's first whole, then changes.
      {"top_k_pulls", "compression { codec: TOP_K ratio: 0.25 min_numel: 64 pulls: true }", 0.6,
       0.6},
  };
  for (const Case& c : cases) {
    const Outcome compressed = Train(c.name, c.spec);
    const double pushed = static_cast<double>(compressed.bytes_out) / dense.bytes_out;
    const double pulled = static_cast<double>(compressed.bytes_in) / dense.bytes_in;
    std::printf("%s: accuracy %.4f (dense %.4f), bytes pushed %.3f and pulled %.3f of dense\n",
                c.name, compressed.accuracy, dense.accuracy, pushed, pulled);
    EXPECT_GE(compressed.accuracy, dense.accuracy - 0.03) << c.name;
    EXPECT_LE(pushed, c.most_pushed) << c.name;
    EXPECT_LE(pulled, c.most_pulled) << c.name;
    EXPECT_GT(compressed.bytes_out, 0) << c.name;
  }
}

// A compression out of range is refused with the job: the scheduler exits 2
// before it listens.
TEST(CompressionTest, AnOutOfRangeSpecIsRefused) {
  const std::string dir = NewTempDir("bad_compression");
  for (const char* bad :
       {"compression { codec: TOP_K ratio: 0.9 }", "compression { codec: SIGN block: 12 }",
        "compression { codec: SIGN min_numel: 0 }", "compression { pulls: true }",
        "compression { codec: TOP_K pulls: true }\nwire_dtype: BF16"}) {
    WriteFile(dir + "/job.pbtxt", SixteenClassJob(absl::StrCat("clocks: 10\n", bad)));
    std::string out;
    const absl::StatusOr<int> code =
        RunCommand({BinaryPath("scheduler/ps_scheduler"), "--job=" + dir + "/job.pbtxt",
                    "--listen=127.0.0.1:0"},
                   &out, absl::Seconds(20), "sched");
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 2) << bad << ": " << out;
  }
}

}  // namespace
}  // namespace testing
}  // namespace pstrain
