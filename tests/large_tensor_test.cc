// Tensors far beyond one gRPC message move intact between a real ps_server
// and a worker: a 64 MiB parameter in fp32 and bf16 over two servers, and a
// parameter of more than 2 GiB (skipped, with the reason, where the machine
// lacks the memory). Each case pulls the initial weights, pushes a known
// gradient (SGD, learning rate 1: w1 = w0 - g exactly in fp32) and pulls again.
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/params.h"
#include "common/partition.h"
#include "gtest/gtest.h"
#include "tests/cluster.h"
#include "worker/ps_client.h"

namespace pstrain {
namespace {

// One dense layer of in x 512 weights (and a 512 bias).
std::string Job(int64_t in) {
  return absl::StrCat("model { input_dim: ", in,
                      " layers { type: DENSE units: 512 } layers { type: SOFTMAX_XENT } }\n"
                      "data { dataset: SYNTHETIC synthetic_dim: ",
                      in,
                      " synthetic_classes: 512 }\n"
                      "optimizer { type: SGD learning_rate: 1 }\n"
                      "consistency: ASP\n"
                      "batch_size: 64\n"
                      "clocks: 1000\n"
                      "seed: 11\n");
}

float Grad(int64_t i) { return static_cast<float>(static_cast<int>(i % 1001) - 500) * 1e-3f; }

int64_t AvailableBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

// Runs the round trip on a cluster of `servers` for a parameter of in x 512,
// in each of `dtypes`. Every `stride`-th weight is checked.
void RoundTrip(int64_t in, int servers, const std::vector<DType>& dtypes, int64_t stride) {
  testing::Cluster cluster("large_tensor");
  testing::ClusterOptions options;
  options.job_text = Job(in);
  options.servers = servers;
  options.workers = 0;
  options.scheduler_flags = {"--num_workers=1"};
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.Logs();
  absl::StatusOr<testing::InProcessWorker> worker =
      testing::JoinAsWorker(cluster.scheduler_address());
  ASSERT_TRUE(worker.ok()) << worker.status() << cluster.Logs();
  const std::vector<ParamInfo> params = ModelParams(worker->job.model());
  const Partition partition = Partition::Make(params, worker->job.chunk_bytes(), servers).value();
  // `exact`: the server's fp32 weights as this test follows them.
  std::vector<std::vector<float>> exact, w0, grads, w1;
  for (const ParamInfo& p : params) {
    exact.emplace_back(p.numel);
    w0.emplace_back(p.numel);
    w1.emplace_back(p.numel);
    grads.emplace_back(p.numel);
    for (int64_t i = 0; i < p.numel; ++i) {
      grads.back()[i] = Grad(i);
      exact.back()[i] = InitialValue(worker->job.seed(), p, i);
    }
  }
  int64_t clock = 0;
  for (DType dtype : dtypes) {
    SCOPED_TRACE(DTypeName(dtype));
    auto wire = [dtype](float v) {
      return dtype == FP32   ? v
             : dtype == BF16 ? Bf16ToFloat(FloatToBf16(v))
                             : HalfToFloat(FloatToHalf(v));
    };
    PsClientOptions popts;
    popts.wire_dtype = dtype;
    PsClient ps(worker->cluster, &partition, worker->id, popts);
    ASSERT_TRUE(ps.Pull(clock, 0, &w0).ok());
    ASSERT_TRUE(ps.Push(clock, 64, grads).ok());
    ++clock;
    ASSERT_TRUE(ps.Pull(clock, clock, &w1).ok());
    for (size_t p = 0; p < params.size(); ++p) {
      const ParamInfo& info = params[p];
      for (int64_t i = 0; i < info.numel; ++i) {
        const bool check = p != 0 || i % stride == 0;
        if (check) {
          ASSERT_EQ(w0[p][i], wire(exact[p][i])) << info.name << "[" << i << "]";
        }
        exact[p][i] -= wire(Grad(i));  // the server's own fp32 arithmetic
        if (check) {
          ASSERT_EQ(w1[p][i], wire(exact[p][i])) << info.name << "[" << i << "]";
        }
      }
    }
    EXPECT_EQ(ps.bytes_out(), (in * 512 + 512) * DTypeSize(dtype));
    EXPECT_EQ(ps.bytes_in(), 2 * (in * 512 + 512) * DTypeSize(dtype));
  }
  worker->Finish();
  absl::StatusOr<int> code = cluster.WaitAll(absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << cluster.Logs();
  EXPECT_EQ(*code, 0) << cluster.Logs();
}

TEST(LargeTensorTest, SixtyFourMibInFp32AndBf16) {
  RoundTrip(/*in=*/32768, /*servers=*/2, {FP32, BF16}, /*stride=*/1);  // 64 MiB of weights
}

TEST(LargeTensorTest, MoreThanTwoGib) {
  const int64_t in = (int64_t{1} << 20) + 1;  // 2 GiB + 2 KiB of weights
  // The server holds the weights once; this process holds them three times
  // (followed, pulled twice) and the gradient once; gRPC buffers come on top.
  const int64_t need = int64_t{14} << 30;
  const int64_t have = AvailableBytes();
  if (have < need) {
    GTEST_SKIP() << "needs " << (need >> 30) << " GiB of available memory, the machine has "
                 << (have >> 30) << " GiB";
  }
  RoundTrip(in, /*servers=*/1, {FP32}, /*stride=*/997);
}

}  // namespace
}  // namespace pstrain
