// Push and pull throughput of one worker against one server on loopback, for
// 1, 4, 16 and 64 MiB tensors in fp32 and bf16, next to two references the
// same binary measures in the same run: a plain TCP stream between two
// processes (the ceiling of the gRPC path) and a default-settings gRPC unary
// call on one channel. Then the shared-memory path (common/shm_link.h) in
// fp32 against its own ceiling: a memcpy of the same bytes in and out (the
// push's copy into the segment and the pull's copy out of it). The server is
// the real ps_server (with ps_scheduler), the worker side is this process on
// PsClient. Prints one JSON object.
//
//   bazel run -c opt //bench:transport_bench -- [--sizes_mib=1,4,16,64] [--only_shm]
//
// Throughput counts the tensor's fp32 bytes once per operation: a push+pull
// round trip of 16 MiB counts 16 MiB, and so does the TCP echo it is
// compared with (16 MiB there and back).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/bench.grpc.pb.h"
#include "bench/reference_peers.h"
#include "common/daemon.h"
#include "common/dtype.h"
#include "common/logging.h"
#include "common/params.h"
#include "common/partition.h"
#include "common/rpc.h"
#include "grpcpp/grpcpp.h"
#include "tests/cluster.h"
#include "worker/ps_client.h"

ABSL_FLAG(std::string, sizes_mib, "1,4,16,64", "tensor sizes in MiB of fp32");
ABSL_FLAG(double, min_seconds, 0.6, "time each measurement at least this long");
ABSL_FLAG(int, channels_per_server, 2, "PsClient connections to the server");
ABSL_FLAG(int64_t, max_request_bytes, 1 << 20, "PsClient's largest call");
ABSL_FLAG(int64_t, chunk_bytes, 1 << 20, "the job's chunk_bytes (the servers' unit of storage)");
ABSL_FLAG(bool, only_shm, false,
          "measure only the shared-memory path against memcpy (for profiling it)");

namespace pstrain {
namespace {

using Clock = std::chrono::steady_clock;

// Mean throughput in GB/s of `op` moving `bytes`, after one warm-up call,
// repeated for at least min_seconds. A failed op ends the program.
template <typename Op>
double Throughput(int64_t bytes, Op op, double seconds = 0) {
  if (!op()) std::exit(1);
  const double budget = seconds > 0 ? seconds : absl::GetFlag(FLAGS_min_seconds);
  const auto t0 = Clock::now();
  int reps = 0;
  double elapsed = 0;
  while (elapsed < budget || reps < 3) {
    if (!op()) std::exit(1);
    ++reps;
    elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  return static_cast<double>(bytes) * reps / elapsed / 1e9;
}

// ---- pstrain -----------------------------------------------------------

// A job of one dense layer holding `floats` weights (plus a 512 bias).
std::string JobText(int64_t floats) {
  const int64_t in = floats / 512;
  return absl::StrCat(
      "name: 'transport_bench'\n"
      "model { input_dim: ",
      in,
      " layers { type: DENSE units: 512 } layers { type: SOFTMAX_XENT } }\n"
      "data { dataset: SYNTHETIC synthetic_dim: ",
      in,
      " synthetic_classes: 512 }\n"
      "optimizer { type: SGD learning_rate: 1e-9 }\n"
      "consistency: ASP\n"
      "batch_size: 64\n"
      "clocks: 100000000\n"
      "chunk_bytes: ",
      absl::GetFlag(FLAGS_chunk_bytes), "\n");
}

struct PstrainResult {
  double push = 0, pull = 0, push_pull = 0;
  double push_pull_one_trip = 0;  // PsClient::PushPull: the pull sent with the push
  // Medians over kPairs of (push+pull / TCP echo) and (one trip / TCP echo),
  // each measured right after its echo, so that the machine's drift hits
  // both sides alike.
  double paired_ratio = 0;
  double paired_ratio_one_trip = 0;
  std::pair<double, double> paired_range;  // of paired_ratio's pairs
};

constexpr int kPairs = 9;

// One client's (one wire dtype's) rates of push, pull, push+pull and the
// one-trip push+pull of `bytes`, and kPairs pairs of push+pull against
// `ceiling`; *clock counts the iterations pushed so far.
PstrainResult MeasureClient(PsClient& ps, int64_t bytes, const std::function<bool()>& ceiling,
                            const std::vector<std::vector<float>>& grads,
                            std::vector<std::vector<float>>* weights, int64_t* clock_in) {
  int64_t& clock = *clock_in;
  auto push = [&] {
    const absl::Status st = ps.Push(clock++, 64, grads);
    if (!st.ok()) std::fprintf(stderr, "push: %s\n", std::string(st.message()).c_str());
    return st.ok();
  };
  auto pull = [&] {
    const absl::Status st = ps.Pull(clock, 0, weights);
    if (!st.ok()) std::fprintf(stderr, "pull: %s\n", std::string(st.message()).c_str());
    return st.ok();
  };
  PstrainResult r;
  r.push = Throughput(bytes, push);
  r.pull = Throughput(bytes, pull);
  r.push_pull = Throughput(bytes, [&] { return push() && pull(); });
  auto one_trip = [&] {
    const absl::Status st = ps.PushPull(clock, 64, grads, 0, clock + 1, clock + 1, weights);
    ++clock;
    if (!st.ok()) std::fprintf(stderr, "push_pull: %s\n", std::string(st.message()).c_str());
    return st.ok();
  };
  r.push_pull_one_trip = Throughput(bytes, one_trip);
  std::vector<double> ratios, ratios_one_trip;
  for (int i = 0; i < kPairs; ++i) {
    double top = Throughput(bytes, ceiling, 0.2);
    ratios.push_back(Throughput(bytes, [&] { return push() && pull(); }, 0.2) / top);
    top = Throughput(bytes, ceiling, 0.2);
    ratios_one_trip.push_back(Throughput(bytes, one_trip, 0.2) / top);
  }
  std::sort(ratios.begin(), ratios.end());
  std::sort(ratios_one_trip.begin(), ratios_one_trip.end());
  r.paired_ratio = ratios[kPairs / 2];
  r.paired_ratio_one_trip = ratios_one_trip[kPairs / 2];
  r.paired_range = {ratios.front(), ratios.back()};
  return r;
}

// Starts ps_scheduler and ps_server for a tensor of `floats`, joins as the
// only worker, measures each wire dtype, and ends the job.
std::vector<PstrainResult> MeasurePstrain(int64_t floats, const std::vector<DType>& dtypes,
                                          bool shm, const std::function<bool()>& ceiling) {
  testing::Cluster cluster("transport_bench");
  testing::ClusterOptions options;
  options.job_text = JobText(floats);
  options.servers = 1;
  options.workers = 0;  // this process is the worker
  options.scheduler_flags = {"--num_workers=1"};
  if (const absl::Status st = cluster.Start(options); !st.ok()) {
    std::fprintf(stderr, "transport_bench: %s\n%s", std::string(st.message()).c_str(),
                 cluster.Logs().c_str());
    std::exit(1);
  }
  absl::StatusOr<testing::InProcessWorker> worker =
      testing::JoinAsWorker(cluster.scheduler_address());
  if (!worker.ok()) {
    std::fprintf(stderr, "transport_bench: join: %s\n",
                 std::string(worker.status().message()).c_str());
    std::exit(1);
  }
  const JobSpec& job = worker->job;
  const int id = worker->id;
  const std::vector<ParamInfo> params = ModelParams(job.model());
  const Partition partition = Partition::Make(params, job.chunk_bytes(), 1).value();
  std::vector<std::vector<float>> grads, weights;
  int64_t total_floats = 0;
  for (const ParamInfo& p : params) {
    grads.emplace_back(p.numel, 1e-3f);
    weights.emplace_back(p.numel, 0.0f);
    total_floats += p.numel;
  }
  const int64_t bytes = total_floats * 4;
  std::vector<PstrainResult> results;
  int64_t clock = 0;
  for (DType dtype : dtypes) {
    PsClientOptions popts;
    popts.wire_dtype = dtype;
    popts.channels_per_server = absl::GetFlag(FLAGS_channels_per_server);
    popts.max_request_bytes = absl::GetFlag(FLAGS_max_request_bytes);
    popts.shm = shm;
    PsClient ps(worker->cluster, &partition, id, popts);
    const PstrainResult r = MeasureClient(ps, bytes, ceiling, grads, &weights, &clock);
    if (shm && ps.shm_segments() == 0) {
      std::fprintf(stderr, "transport_bench: the server granted no shared memory\n");
      std::exit(1);
    }
    results.push_back(r);
  }
  worker->Finish();
  (void)cluster.WaitAll(absl::Seconds(20));
  return results;
}

std::string J(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.4g", v);
  return buf;
}

// The references of one size: a bare TCP stream (push, pull, echo) and a
// default-settings gRPC unary call, in GB/s.
struct References {
  double tcp_push = 0, tcp_pull = 0, tcp_echo = 0;
  // What a push followed by a pull (two exchanges, not one) reaches over
  // bare sockets: the ceiling of any two-call push+pull on this machine.
  double tcp_push_then_pull = 0;
  double grpc_push = 0, grpc_pull = 0, grpc_push_pull = 0;
};

References MeasureReferences(int64_t n, int tcp, std::vector<char>* buf,
                             bench::Echo::Stub* stub) {
  auto tcp_op = [&](uint64_t mode) {
    return [&, mode] {
      const TcpHeader h{mode, static_cast<uint64_t>(n)};
      if (!WriteAll(tcp, reinterpret_cast<const char*>(&h), sizeof(h))) return false;
      if (mode == 0) return WriteAll(tcp, buf->data(), n) && ReadAll(tcp, buf->data(), 1);
      if (mode == 1) return ReadAll(tcp, buf->data(), n);
      return WriteAll(tcp, buf->data(), n) && ReadAll(tcp, buf->data(), n);
    };
  };
  References r;
  r.tcp_push = Throughput(n, tcp_op(0));
  r.tcp_pull = Throughput(n, tcp_op(1));
  r.tcp_echo = Throughput(n, tcp_op(2));
  r.tcp_push_then_pull = 1.0 / (1.0 / r.tcp_push + 1.0 / r.tcp_pull);

  bench::Blob data_blob, size_blob;
  data_blob.set_data(std::string(n, 'd'));
  size_blob.set_size(n);
  auto grpc_op = [&](int which) {
    return [&, which] {
      grpc::ClientContext ctx;
      bench::Blob resp;
      grpc::Status st = which == 0   ? stub->Push(&ctx, data_blob, &resp)
                        : which == 1 ? stub->Pull(&ctx, size_blob, &resp)
                                     : stub->PushPull(&ctx, data_blob, &resp);
      if (!st.ok()) std::fprintf(stderr, "grpc: %s\n", st.error_message().c_str());
      return st.ok();
    };
  };
  r.grpc_push = Throughput(n, grpc_op(0));
  r.grpc_pull = Throughput(n, grpc_op(1));
  r.grpc_push_pull = Throughput(n, grpc_op(2));
  return r;
}

// The shared-memory path for an n-byte tensor, and its ceiling: a memcpy
// of the same bytes in (the push's write into the segment) and out (the
// pull's read from it). Returns {memcpy GB/s, the path's figures}.
std::pair<double, PstrainResult> MeasureShm(int64_t n) {
  const int64_t ps_bytes = (n / 4 + 512) * 4;  // the tensor's weight and bias
  std::vector<char> a(ps_bytes, 'a'), b(ps_bytes), c(ps_bytes);
  auto copy_in_out = [&] {
    std::memcpy(b.data(), a.data(), ps_bytes);
    std::memcpy(c.data(), b.data(), ps_bytes);
    asm volatile("" : : "r"(c.data()) : "memory");  // the copies stay
    return true;
  };
  const double memcpy_in_out = Throughput(ps_bytes, copy_in_out);
  return {memcpy_in_out, MeasurePstrain(n / 4, {FP32}, /*shm=*/true, copy_in_out)[0]};
}

// The shared-memory path's JSON fields (of one size's object).
std::string ShmJson(double memcpy_in_out, const PstrainResult& shm) {
  return absl::StrCat(
      "\"memcpy_in_out\": ", J(memcpy_in_out), ", \"pstrain_shm_fp32\": {\"push\": ", J(shm.push),
      ", \"pull\": ", J(shm.pull), ", \"push_pull\": ", J(shm.push_pull),
      ", \"push_pull_one_trip\": ", J(shm.push_pull_one_trip),
      "},\n     \"push_pull_shm_over_memcpy_paired_median\": ", J(shm.paired_ratio),
      ", \"push_pull_shm_over_memcpy_paired_range\": [", J(shm.paired_range.first), ", ",
      J(shm.paired_range.second), "], \"push_pull_one_trip_shm_over_memcpy_paired_median\": ",
      J(shm.paired_ratio_one_trip));
}

// One size's JSON object (without the comma after it): the references,
// pstrain's fp32 and bf16 rates (ps[0], ps[1]) and ratios, and `shm_json`.
std::string SizeJson(int64_t n, const References& r, const std::vector<PstrainResult>& ps,
                     const std::string& shm_json) {
  auto rates = [](const PstrainResult& p) {
    return absl::StrCat("{\"push\": ", J(p.push), ", \"pull\": ", J(p.pull),
                        ", \"push_pull\": ", J(p.push_pull), ", \"push_pull_one_trip\": ",
                        J(p.push_pull_one_trip), "}");
  };
  return absl::StrCat(
      "    {\"mib\": ", n >> 20, ",\n     \"tcp\": {\"push\": ", J(r.tcp_push),
      ", \"pull\": ", J(r.tcp_pull), ", \"echo\": ", J(r.tcp_echo),
      "},\n     \"grpc_default\": {\"push\": ", J(r.grpc_push), ", \"pull\": ", J(r.grpc_pull),
      ", \"push_pull\": ", J(r.grpc_push_pull), "},\n     \"pstrain_fp32\": ", rates(ps[0]),
      ",\n     \"pstrain_bf16\": ", rates(ps[1]),
      ",\n     \"push_pull_fp32_over_tcp_echo_paired_median\": ", J(ps[0].paired_ratio),
      ", \"push_pull_one_trip_fp32_over_tcp_echo_paired_median\": ",
      J(ps[0].paired_ratio_one_trip),
      ", \"push_pull_fp32_over_tcp_echo\": ", J(ps[0].push_pull / r.tcp_echo),
      ", \"tcp_push_then_pull_over_tcp_echo\": ", J(r.tcp_push_then_pull / r.tcp_echo),
      ", \"grpc_default_over_tcp_echo\": ", J(r.grpc_push_pull / r.tcp_echo), ",\n     ",
      shm_json, "}");
}

// --only_shm: the shared-memory path alone, no TCP or gRPC references.
int RunShmOnly(const std::vector<int64_t>& sizes) {
  TuneMallocForBulkTraffic();
  std::printf("{\n  \"bench\": \"transport_bench\",\n  \"only_shm\": true,\n  \"sizes\": [\n");
  bool pass = true;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t n = sizes[i];
    const auto [memcpy_in_out, shm] = MeasureShm(n);
    if (n <= (16 << 20)) pass = pass && shm.paired_ratio >= 0.7;
    std::printf("    {\"mib\": %lld, %s}%s\n", static_cast<long long>(n >> 20),
                ShmJson(memcpy_in_out, shm).c_str(), i + 1 < sizes.size() ? "," : "");
    std::fflush(stdout);
  }
  std::printf(
      "  ],\n  \"unit\": \"GB/s of the tensor's fp32 bytes, counted once per operation\",\n"
      "  \"goal_shm_push_pull_1_4_16_mib_at_least_0_7_of_memcpy\": %s\n}\n",
      pass ? "true" : "false");
  return 0;
}

// --sizes_mib in bytes; empty for a bad entry.
std::vector<int64_t> ParseSizes() {
  std::vector<int64_t> sizes;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_sizes_mib), ',')) {
    int64_t m;
    if (!absl::SimpleAtoi(part, &m) || m < 1 || m > 4096) return {};
    sizes.push_back(m << 20);
  }
  return sizes;
}

int Run(const char* argv0) {
  const std::vector<int64_t> sizes = ParseSizes();
  if (sizes.empty()) {
    std::fprintf(stderr, "transport_bench: bad --sizes_mib entry\n");
    return 2;
  }
  // The daemons are in this binary's runfiles (bazel run, or bazel-bin/...).
  if (std::getenv("TEST_SRCDIR") == nullptr) {
    setenv("TEST_SRCDIR", absl::StrCat(argv0, ".runfiles").c_str(), 1);
    setenv("TEST_WORKSPACE", "pstrain", 1);
  }
  if (absl::GetFlag(FLAGS_only_shm)) return RunShmOnly(sizes);
  // Room for the largest tensor and the pstrain job's bias beside it.
  const size_t max_bytes =
      static_cast<size_t>(*std::max_element(sizes.begin(), sizes.end())) + (64 << 10);
  // Both reference peers are forked before this process starts gRPC.
  const int tcp = StartTcpPeer(max_bytes);
  const std::string grpc_address = StartGrpcPeer(max_bytes);
  // The worker side tunes malloc as ps_worker does (the peers above keep
  // glibc's defaults; the default-gRPC client below shares this process).
  TuneMallocForBulkTraffic();

  std::vector<char> buf(max_bytes, 'z');
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  auto stub = bench::Echo::NewStub(
      grpc::CreateCustomChannel(grpc_address, grpc::InsecureChannelCredentials(), args));

  std::printf(
      "{\n  \"bench\": \"transport_bench\",\n  \"channels_per_server\": %d,\n"
      "  \"max_request_bytes\": %lld,\n  \"chunk_bytes\": %lld,\n  \"sizes\": [\n",
      absl::GetFlag(FLAGS_channels_per_server),
      static_cast<long long>(absl::GetFlag(FLAGS_max_request_bytes)),
      static_cast<long long>(absl::GetFlag(FLAGS_chunk_bytes)));
  bool pass = true, pass_one_trip = true, pass_shm = true;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t n = sizes[i];
    const References r = MeasureReferences(n, tcp, &buf, stub.get());

    // The echo of the pstrain tensor's exact size (its weight and bias).
    const int64_t ps_bytes = (n / 4 + 512) * 4;
    auto echo_ps_size = [&] {
      const TcpHeader h{2, static_cast<uint64_t>(ps_bytes)};
      return WriteAll(tcp, reinterpret_cast<const char*>(&h), sizeof(h)) &&
             WriteAll(tcp, buf.data(), ps_bytes) && ReadAll(tcp, buf.data(), ps_bytes);
    };
    const std::vector<PstrainResult> ps =
        MeasurePstrain(n / 4, {FP32, BF16}, /*shm=*/false, echo_ps_size);
    const auto [memcpy_in_out, shm] = MeasureShm(n);
    if (n <= (16 << 20)) pass_shm = pass_shm && shm.paired_ratio >= 0.7;
    const double fraction = ps[0].paired_ratio;
    const double fraction_one_trip = ps[0].paired_ratio_one_trip;
    if (n <= (16 << 20)) {
      pass = pass && fraction >= 0.5;  // the paired median
      pass_one_trip = pass_one_trip && fraction_one_trip >= 0.5;
    }
    std::printf("%s%s\n", SizeJson(n, r, ps, ShmJson(memcpy_in_out, shm)).c_str(),
                i + 1 < sizes.size() ? "," : "");
    std::fflush(stdout);
  }
  const TcpHeader quit{3, 0};
  WriteAll(tcp, reinterpret_cast<const char*>(&quit), sizeof(quit));
  std::printf(
      "  ],\n  \"unit\": \"GB/s of the tensor's fp32 bytes, counted once per operation\",\n"
      "  \"goal_push_pull_1_4_16_mib_at_least_half_of_tcp\": %s,\n"
      "  \"goal_push_pull_one_trip_1_4_16_mib_at_least_half_of_tcp\": %s,\n"
      "  \"goal_shm_push_pull_1_4_16_mib_at_least_0_7_of_memcpy\": %s\n}\n",
      pass ? "true" : "false", pass_one_trip ? "true" : "false", pass_shm ? "true" : "false");
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  pstrain::LogToStderr();
  absl::ParseCommandLine(argc, argv);
  return pstrain::Run(argv[0]);
}
