// Bounded memory under a flood: 64 concurrent callers, each on a connection
// of its own, send a training server 3,000 requests of random or zeroed
// bytes of up to 8 MiB (sizes log-uniform, so most are small and some are
// the largest), ten floods in a row. Every request is refused, training goes
// on, and the server's anonymous resident memory ends within 64 MiB of what
// it was before the first flood. PSTRAIN_FLOODS changes the number of
// floods (bench use).
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/rpc.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "tests/cluster.h"
#include "tests/test_jobs.h"
#include "tests/wait.h"

namespace pstrain {
namespace testing {
namespace {

constexpr int kCallers = 64;
constexpr int kRequests = 3000;
constexpr size_t kMaxBytes = 8 << 20;

// A process's RssAnon in bytes (-1 if unreadable).
int64_t RssAnon(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("RssAnon:", 0) != 0) continue;
    int64_t kb = 0;
    std::string digits;
    for (char c : line) {
      if (c >= '0' && c <= '9') digits += c;
    }
    if (absl::SimpleAtoi(digits, &kb)) return kb << 10;
  }
  return -1;
}

struct FloodResult {
  std::map<grpc::StatusCode, int> codes;  // answers by status code
  double seconds = 0;
};

// One flood: kRequests requests from kCallers threads.
FloodResult Flood(const std::string& address, const std::string& noise, uint32_t seed) {
  std::atomic<int> next{0};
  std::vector<std::map<grpc::StatusCode, int>> codes(kCallers);
  const absl::Time start = absl::Now();
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      grpc::ChannelArguments args;
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own
      args.SetMaxSendMessageSize(kMaxMessageBytes);
      grpc::GenericStub stub(
          grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
      std::mt19937 rng(seed * 131 + c);
      std::uniform_real_distribution<double> log_size(0, std::log(double(kMaxBytes)));
      for (int i = next++; i < kRequests; i = next++) {
        const size_t size = static_cast<size_t>(std::exp(log_size(rng)));
        const size_t offset = rng() % (noise.size() - size);
        // Random bytes, or zeros (a field numbered 0: malformed from the start).
        const char* bytes = noise.data() + ((i % 4 == 3) ? 0 : offset);
        grpc::Slice slice(bytes, size, grpc::Slice::STATIC_SLICE);
        grpc::ByteBuffer request(&slice, 1), reply;
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
        const char* method =
            i % 2 ? "/pstrain.ParameterServer/Push" : "/pstrain.ParameterServer/Pull";
        absl::Notification done;
        grpc::Status status;
        stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &reply, [&](grpc::Status s) {
          status = std::move(s);
          done.Notify();
        });
        done.WaitForNotification();
        ++codes[c][status.error_code()];
      }
    });
  }
  for (std::thread& t : callers) t.join();
  FloodResult out;
  out.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  for (const auto& per : codes) {
    for (const auto& [code, n] : per) out.codes[code] += n;
  }
  return out;
}

TEST(FloodTest, FloodsAreRefusedAndLeaveTheServersMemoryBounded) {
  int floods = 10;
  if (const char* env = std::getenv("PSTRAIN_FLOODS")) (void)absl::SimpleAtoi(env, &floods);
  Cluster cluster("flood");
  ClusterOptions options;
  options.job_text = SmallJob("batch_size: 16\nclocks: 10000000\n");
  options.worker_flags = {{"--straggler=fixed:5"}};
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.Logs();
  std::string server;  // once the worker has trained 20 clocks
  ASSERT_TRUE(WaitForStatus(
      cluster.scheduler_address(),
      [&](const ClusterStatus& st) {
        server = MemberOf(st, SERVER, 0).address();
        return SlowestClock(st) >= 20 && !server.empty();
      },
      absl::Seconds(60), absl::Milliseconds(100)))
      << cluster.Logs();
  std::string noise(2 * kMaxBytes, '\0');
  std::mt19937 rng(1);
  for (size_t i = kMaxBytes; i < noise.size(); ++i) noise[i] = static_cast<char>(rng());
  const pid_t pid = cluster.servers()[0].pid();
  const int64_t before = RssAnon(pid);
  ASSERT_GT(before, 0);
  std::printf("before: RssAnon %.1f MiB, worker clock %lld\n", before / 1048576.0,
              static_cast<long long>(SlowestWorkerClock(cluster.scheduler_address())));
  int64_t after = before;
  for (int f = 0; f < floods; ++f) {
    const int64_t clock = SlowestWorkerClock(cluster.scheduler_address());
    const FloodResult r = Flood(server, noise, f + 1);
    absl::SleepFor(absl::Seconds(2));  // training goes on; freed memory is given back
    after = RssAnon(pid);
    const int64_t moved = SlowestWorkerClock(cluster.scheduler_address()) - clock;
    std::string codes;
    for (const auto& [code, n] : r.codes) absl::StrAppend(&codes, " code ", code, ": ", n, ";");
    std::printf("flood %d: %.1f s,%s RssAnon %.1f MiB, worker +%lld clocks\n", f + 1, r.seconds,
                codes.c_str(), after / 1048576.0, static_cast<long long>(moved));
    EXPECT_EQ(r.codes.count(grpc::StatusCode::OK), 0u) << "a flood request was accepted";
    EXPECT_GT(moved, 0) << "training stopped during flood " << f + 1;
    ASSERT_TRUE(cluster.servers()[0].running()) << cluster.Logs();
  }
  EXPECT_LE(after - before, int64_t{64} << 20)
      << "RssAnon " << before / 1048576.0 << " -> " << after / 1048576.0 << " MiB";
}

}  // namespace
}  // namespace testing
}  // namespace pstrain
