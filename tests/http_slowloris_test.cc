// A slowloris against the scheduler's HTTP port (--metrics_port: /metrics
// and the dashboard): 500 connections from 127.0.0.1, each holding an
// unfinished request header and adding a byte to it every 2 s (reopened
// when the server closes it), for 20 s (PSTRAIN_SLOWLORIS_S changes it),
// then closed. Training goes on, the port
// answers normal requests during the attack, and within 2 s of its end.
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/cluster.h"
#include "tests/test_jobs.h"
#include "tests/wait.h"

namespace pstrain {
namespace testing {
namespace {

constexpr int kConnections = 500;
constexpr absl::Duration kTrickle = absl::Seconds(2);
constexpr absl::Duration kProbeTimeout = absl::Seconds(2);

absl::Duration HoldTime() {
  int seconds = 20;
  const char* env = std::getenv("PSTRAIN_SLOWLORIS_S");
  if (env != nullptr && !absl::SimpleAtoi(env, &seconds)) seconds = 20;
  return absl::Seconds(std::clamp(seconds, 1, 120));
}

// Raises this process's soft open-file limit to `want` (or the hard
// limit); the limit now in force.
rlim_t RaiseFileLimit(rlim_t want) {
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  if (lim.rlim_cur < want) {
    lim.rlim_cur = std::min(want, lim.rlim_max);
    setrlimit(RLIMIT_NOFILE, &lim);
    getrlimit(RLIMIT_NOFILE, &lim);
  }
  return lim.rlim_cur;
}

// A TCP connection to 127.0.0.1:port whose sends and receives give up
// after `timeout` (-1 if it cannot connect).
int Connect(int port, absl::Duration timeout) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  const timeval tv = absl::ToTimeval(timeout);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));  // connect() too
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Whether GET /metrics is answered 200 within about `timeout`.
bool Answers(int port, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  const int fd = Connect(port, timeout);
  if (fd < 0) return false;
  const std::string request = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  std::string reply;
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
      static_cast<ssize_t>(request.size())) {
    char buf[4096];
    for (ssize_t k; reply.size() < 12 && absl::Now() < deadline &&
                    (k = recv(fd, buf, sizeof(buf), 0)) > 0;) {
      reply.append(buf, static_cast<size_t>(k));
    }
  }
  close(fd);
  // "HTTP/1.x 200"
  return absl::Now() <= deadline && reply.size() >= 12 && reply.compare(0, 7, "HTTP/1.") == 0 &&
         reply.compare(8, 4, " 200") == 0;
}

// The attack's connections: each sent the start of a request whose header
// never ends; one the server closes (its request deadline) is opened again.
class Slowloris {
 public:
  explicit Slowloris(int port) : port_(port) {}
  ~Slowloris() { Close(); }
  // Opens the connections; false if one cannot be made.
  bool Open() {
    for (int i = 0; i < kConnections; ++i) {
      fds_.push_back(Start());
      if (fds_.back() < 0) return false;
    }
    return true;
  }
  // One more byte of header on every connection, reopening closed ones;
  // how many are open after it.
  int Trickle() {
    int open = 0;
    for (int& fd : fds_) {
      char byte;
      const ssize_t r = fd < 0 ? 0 : recv(fd, &byte, 1, MSG_DONTWAIT);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
        if (fd >= 0) close(fd);
        fd = Start();
        ++reopened_;
      }
      open += fd >= 0 && send(fd, "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1;
    }
    return open;
  }
  int reopened() const { return reopened_; }
  void Close() {
    for (int fd : fds_) {
      if (fd >= 0) close(fd);
    }
    fds_.clear();
  }

 private:
  int Start() {
    const std::string start = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
    const int fd = Connect(port_, absl::Seconds(5));
    if (fd >= 0) send(fd, start.data(), start.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    return fd;
  }

  const int port_;
  std::vector<int> fds_;
  int reopened_ = 0;
};

// The port of "HOST:PORT" (-1 if none).
int PortOf(const std::string& address) {
  int port = -1;
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port)) return -1;
  return port;
}

// The scheduler's metrics address once it serves one and a worker trains.
std::string MetricsAddress(const std::string& scheduler) {
  std::string address;
  WaitForStatus(
      scheduler,
      [&](const ClusterStatus& st) {
        if (SlowestClock(st) >= 1) address = st.scheduler().metrics_address();
        return !address.empty();
      },
      absl::Seconds(30), absl::Milliseconds(200));
  return address;
}

TEST(HttpSlowlorisTest, ThePortAnswersDuringAndRightAfterTheAttack) {
  if (RaiseFileLimit(4096) < 2 * kConnections) {
    GTEST_SKIP() << "needs " << 2 * kConnections << " open files (ulimit -n)";
  }
  Cluster cluster("slowloris");
  ClusterOptions options;
  options.job_text = SmallJob("batch_size: 32\nclocks: 1000000\n");  // outlasts the test
  options.scheduler_flags = {"--metrics_port=0"};
  options.worker_flags = {{"--straggler=fixed:20"}};
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.Logs();
  const int port = PortOf(MetricsAddress(cluster.scheduler_address()));
  ASSERT_GT(port, 0) << cluster.Logs();
  ASSERT_TRUE(Answers(port, kProbeTimeout));

  Slowloris attack(port);
  ASSERT_TRUE(attack.Open());
  const int64_t clock_before = SlowestWorkerClock(cluster.scheduler_address());
  int probes = 0, answered = 0, least_alive = kConnections;
  for (const absl::Time end = absl::Now() + HoldTime(); absl::Now() < end;) {
    const absl::Time next = absl::Now() + kTrickle;
    least_alive = std::min(least_alive, attack.Trickle());
    ++probes;
    answered += Answers(port, kProbeTimeout);
    absl::SleepFor(next - absl::Now());
  }
  // The attack held its connections (a trickle keeps them from the idle
  // timeout; those closed at their request deadline it opened again), and
  // the port answered all the same; training went on.
  EXPECT_GE(least_alive, kConnections * 9 / 10);
  EXPECT_GE(answered * 10, probes * 8) << answered << " of " << probes << " probes answered";
  EXPECT_GT(SlowestWorkerClock(cluster.scheduler_address()), clock_before);

  attack.Close();
  const absl::Time closed = absl::Now();
  bool ok = false;
  while (!(ok = Answers(port, absl::Milliseconds(500))) &&
         absl::Now() - closed < absl::Seconds(10)) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  const absl::Duration after = absl::Now() - closed;
  std::cout << "slowloris of " << kConnections << " connections for " << HoldTime() << ": "
            << answered << " of " << probes << " probes answered during it, at least "
            << least_alive << " connections held (" << attack.reopened()
            << " reopened after the server closed them); answered " << after << " after it\n";
  EXPECT_TRUE(ok);
  EXPECT_LE(after, absl::Seconds(2)) << "the port answered " << after << " after the attack";
  EXPECT_TRUE(cluster.scheduler().running()) << cluster.Logs();
}

}  // namespace
}  // namespace testing
}  // namespace pstrain
