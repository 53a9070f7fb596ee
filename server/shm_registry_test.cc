#include "server/shm_registry.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <sstream>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"

namespace pstrain {
namespace {

// A worker's side of the exchange: presents `ticket`, returns the grant
// and its descriptor (kept open in *sock while the segment should live).
ShmGrant Present(const ShmRegistry& registry, const std::string& ticket, int* sock, int* fd) {
  absl::StatusOr<int> conn = ConnectAbstract(registry.socket_name(), absl::Seconds(5));
  EXPECT_TRUE(conn.ok()) << conn.status();
  *sock = *conn;
  ShmGrant grant;
  EXPECT_TRUE(SendWithFd(*sock, ticket.data(), ticket.size(), -1).ok());
  const absl::Status st = RecvWithFd(*sock, &grant, sizeof(grant), fd);
  if (!st.ok()) grant.id = 0;
  return grant;
}

bool WaitFor(const std::function<bool()>& what) {
  for (int i = 0; i < 500; ++i) {
    if (what()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

TEST(ShmRegistryTest, AValidTicketGetsASegmentThatLivesWithTheConnection) {
  ShmRegistry::Options options;
  options.grace = absl::Seconds(1);
  absl::StatusOr<std::unique_ptr<ShmRegistry>> registry = ShmRegistry::Start(options);
  ASSERT_TRUE(registry.ok()) << registry.status();
  absl::StatusOr<std::string> ticket = (*registry)->Issue(8192);
  ASSERT_TRUE(ticket.ok());
  int sock = -1, fd = -1;
  const ShmGrant grant = Present(**registry, *ticket, &sock, &fd);
  ASSERT_NE(grant.id, 0u);
  EXPECT_EQ(grant.bytes, 8192);
  absl::StatusOr<std::unique_ptr<ShmSegment>> mine = ShmSegment::Adopt(fd, 8192);
  ASSERT_TRUE(mine.ok()) << mine.status();
  std::shared_ptr<ShmSegment> theirs = (*registry)->Find(grant.id);
  ASSERT_NE(theirs, nullptr);
  (*mine)->data()[100] = 7;
  EXPECT_EQ(theirs->data()[100], 7);  // one memory
  EXPECT_EQ((*registry)->attached(), 1);
  close(sock);  // the worker exits (or is killed)
  EXPECT_TRUE(WaitFor([&] { return (*registry)->attached() == 0; }));
  // A request it sent before it died still finds the segment for the grace.
  const absl::Time closed = absl::Now();
  EXPECT_NE((*registry)->Find(grant.id), nullptr);
  EXPECT_TRUE(WaitFor([&] { return (*registry)->Find(grant.id) == nullptr; }));
  EXPECT_GE(absl::Now() - closed, absl::Milliseconds(500));
}

TEST(ShmRegistryTest, NoTicketNoSegment) {
  absl::StatusOr<std::unique_ptr<ShmRegistry>> registry = ShmRegistry::Start();
  ASSERT_TRUE(registry.ok());
  int sock = -1, fd = -1;
  const ShmGrant grant = Present(**registry, std::string(16, 'x'), &sock, &fd);
  EXPECT_EQ(grant.id, 0u);
  EXPECT_LT(fd, 0);
  close(sock);
  EXPECT_EQ((*registry)->attached(), 0);
}

TEST(ShmRegistryTest, ATicketIsGoodOnce) {
  absl::StatusOr<std::unique_ptr<ShmRegistry>> registry = ShmRegistry::Start();
  ASSERT_TRUE(registry.ok());
  absl::StatusOr<std::string> ticket = (*registry)->Issue(4096);
  ASSERT_TRUE(ticket.ok());
  int sock1 = -1, fd1 = -1, sock2 = -1, fd2 = -1;
  EXPECT_NE(Present(**registry, *ticket, &sock1, &fd1).id, 0u);
  EXPECT_EQ(Present(**registry, *ticket, &sock2, &fd2).id, 0u);
  EXPECT_LT(fd2, 0);
  close(fd1);
  close(sock1);
  close(sock2);
}

TEST(ShmRegistryTest, AnExpiredTicketIsRefused) {
  ShmRegistry::Options options;
  options.ticket_life = absl::Milliseconds(50);
  absl::StatusOr<std::unique_ptr<ShmRegistry>> registry = ShmRegistry::Start(options);
  ASSERT_TRUE(registry.ok());
  absl::StatusOr<std::string> ticket = (*registry)->Issue(4096);
  ASSERT_TRUE(ticket.ok());
  absl::SleepFor(absl::Milliseconds(200));
  int sock = -1, fd = -1;
  EXPECT_EQ(Present(**registry, *ticket, &sock, &fd).id, 0u);
  close(sock);
}

TEST(ShmRegistryTest, ATicketInPiecesIsGranted) {
  absl::StatusOr<std::unique_ptr<ShmRegistry>> registry = ShmRegistry::Start();
  ASSERT_TRUE(registry.ok());
  absl::StatusOr<std::string> ticket = (*registry)->Issue(4096);
  ASSERT_TRUE(ticket.ok());
  absl::StatusOr<int> conn = ConnectAbstract((*registry)->socket_name(), absl::Seconds(5));
  ASSERT_TRUE(conn.ok());
  ASSERT_TRUE(SendWithFd(*conn, ticket->data(), 5, -1).ok());
  absl::SleepFor(absl::Milliseconds(100));
  ASSERT_TRUE(SendWithFd(*conn, ticket->data() + 5, ticket->size() - 5, -1).ok());
  ShmGrant grant;
  int fd = -1;
  ASSERT_TRUE(RecvWithFd(*conn, &grant, sizeof(grant), &fd).ok());
  EXPECT_NE(grant.id, 0u);
  EXPECT_GE(fd, 0);
  close(fd);
  close(*conn);
}

TEST(ShmRegistryTest, ConnectionsWaitingForTicketsAreBounded) {
  ShmRegistry::Options options;
  options.max_segments = 2;  // at most 4 waiting
  absl::StatusOr<std::unique_ptr<ShmRegistry>> registry = ShmRegistry::Start(options);
  ASSERT_TRUE(registry.ok());
  std::vector<int> conns;
  for (int i = 0; i < 8; ++i) {
    absl::StatusOr<int> conn = ConnectAbstract((*registry)->socket_name(), absl::Seconds(5));
    ASSERT_TRUE(conn.ok());
    conns.push_back(*conn);
  }
  // The ones past the bound are closed at once (the others wait 5 s).
  absl::SleepFor(absl::Seconds(1));
  int closed = 0;
  for (int conn : conns) {
    pollfd p{conn, POLLIN, 0};
    closed += poll(&p, 1, 0) == 1;
  }
  EXPECT_EQ(closed, 4);
  for (int conn : conns) close(conn);
}

// Every user of the host can connect to the abstract socket: 3,000
// refused connects -- too many waiting, or (as root) another user's -- are
// each counted, and add at most 5 log lines a minute.
TEST(ShmRegistryTest, AFloodOfRefusedConnectsIsCountedAndLogsABoundedNumberOfLines) {
  std::ostringstream lines;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(lines);
  const std::shared_ptr<spdlog::logger> previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("test", sink));
  ShmRegistry::Options options;
  options.max_segments = 1;  // 2 may wait for their tickets
  options.ticket_wait = absl::Minutes(10);  // and do, however slow the flood
  absl::StatusOr<std::unique_ptr<ShmRegistry>> registry = ShmRegistry::Start(options);
  ASSERT_TRUE(registry.ok());
  std::vector<int> waiting;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<int> conn = ConnectAbstract((*registry)->socket_name(), absl::Seconds(5));
    ASSERT_TRUE(conn.ok());
    waiting.push_back(*conn);
  }
  ASSERT_TRUE(WaitFor([&] { return (*registry)->refused() == 0; }));
  const std::string name = (*registry)->socket_name();
  auto flood = [&name](int n) {
    for (int i = 0; i < n; ++i) {
      absl::StatusOr<int> conn = ConnectAbstract(name, absl::Seconds(5));
      if (conn.ok()) close(*conn);
    }
  };
  int flooded = 1500;
  flood(flooded);
  // And as another user (nobody), as a neighbour on the host would: where
  // this process may become one (root outside a user namespace), else as
  // this user again.
  bool as_nobody = false;
  if (geteuid() == 0) {
    const pid_t child = fork();
    if (child == 0) {
      if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
      flood(1500);
      _exit(0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status)) << status;
    as_nobody = WEXITSTATUS(status) == 0;
  }
  if (!as_nobody) flood(1500);
  flooded += 1500;
  EXPECT_TRUE(WaitFor([&] { return (*registry)->refused() == flooded; }))
      << (*registry)->refused();
  registry->reset();
  spdlog::set_default_logger(previous);
  const std::string text = lines.str();
  const int64_t logged = std::count(text.begin(), text.end(), '\n');
  EXPECT_GE(logged, 1);
  EXPECT_LE(logged, 5) << text;
  for (int conn : waiting) close(conn);
}

TEST(ShmRegistryTest, BoundedSegments) {
  ShmRegistry::Options options;
  options.max_segments = 2;
  absl::StatusOr<std::unique_ptr<ShmRegistry>> registry = ShmRegistry::Start(options);
  ASSERT_TRUE(registry.ok());
  ASSERT_TRUE((*registry)->Issue(4096).ok());
  ASSERT_TRUE((*registry)->Issue(4096).ok());
  EXPECT_EQ((*registry)->Issue(4096).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(ShmRegistryTest, AConnectionThatSaysNothingIsClosed) {
  absl::StatusOr<std::unique_ptr<ShmRegistry>> registry = ShmRegistry::Start();
  ASSERT_TRUE(registry.ok());
  absl::StatusOr<int> conn = ConnectAbstract((*registry)->socket_name(), absl::Seconds(10));
  ASSERT_TRUE(conn.ok());
  ShmGrant grant;
  int fd = -1;
  // Closed by the registry after its wait for a ticket (5 s), not kept.
  EXPECT_EQ(RecvWithFd(*conn, &grant, sizeof(grant), &fd).code(),
            absl::StatusCode::kUnavailable);
  close(*conn);
}

// Reads the next frame from `sock` through `reader` (5 s at most); false:
// closed, or no frame.
bool ReadFrame(int sock, FrameReader& reader, ShmFrame* frame) {
  for (int i = 0; i < 500; ++i) {
    absl::StatusOr<bool> next = reader.Next(frame);
    if (!next.ok()) return false;
    if (*next) return true;
    pollfd p{sock, POLLIN, 0};
    poll(&p, 1, 10);
    if (!reader.Fill(sock).ok()) return false;
  }
  return false;
}

TEST(ShmRegistryTest, AnAttachedConnectionsFramesReachTheHandlerAndItsAnswersComeBack) {
  absl::StatusOr<std::unique_ptr<ShmRegistry>> registry = ShmRegistry::Start();
  ASSERT_TRUE(registry.ok());
  std::vector<int32_t> methods;  // the handler's, on the registry's thread
  absl::Mutex mu;
  (*registry)->SetHandler([&](std::shared_ptr<ShmBell> bell, ShmFrame frame) {
    absl::MutexLock lock(&mu);
    methods.push_back(frame.header.code);
    bell->Reply(frame.header.seq, 0, "", "answer to " + frame.body);
  });
  absl::StatusOr<std::string> ticket = (*registry)->Issue(4096);
  ASSERT_TRUE(ticket.ok());
  int sock = -1, fd = -1;
  const ShmGrant grant = Present(**registry, *ticket, &sock, &fd);
  ASSERT_NE(grant.id, 0u);
  close(fd);
  // A push and a pull in one write: handed over in order.
  const std::string two = EncodeFrame(kShmPush, 1, "", "push") + EncodeFrame(kShmPull, 2, "", "pull");
  ASSERT_EQ(send(sock, two.data(), two.size(), MSG_NOSIGNAL), static_cast<ssize_t>(two.size()));
  FrameReader reader;
  ShmFrame first, second;
  ASSERT_TRUE(ReadFrame(sock, reader, &first));
  ASSERT_TRUE(ReadFrame(sock, reader, &second));
  {
    absl::MutexLock lock(&mu);
    EXPECT_EQ(methods, (std::vector<int32_t>{kShmPush, kShmPull}));
  }
  EXPECT_EQ(first.header.seq, 1u);
  EXPECT_EQ(first.body, "answer to push");
  EXPECT_EQ(second.header.seq, 2u);
  EXPECT_EQ(second.body, "answer to pull");
  // Bytes that are not frames end the connection (and the segment's life).
  ShmFrameHeader bad;
  bad.bytes = kMaxShmFrame + 1;
  ASSERT_EQ(send(sock, &bad, sizeof(bad), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(bad)));
  ShmFrame none;
  EXPECT_FALSE(ReadFrame(sock, reader, &none));
  EXPECT_TRUE(WaitFor([&] { return (*registry)->attached() == 0; }));
  close(sock);
}

TEST(ShmRegistryTest, NoFrameIsHandedOverAfterStop) {
  absl::StatusOr<std::unique_ptr<ShmRegistry>> registry = ShmRegistry::Start();
  ASSERT_TRUE(registry.ok());
  std::atomic<int> handled{0};
  (*registry)->SetHandler([&](std::shared_ptr<ShmBell> bell, ShmFrame frame) {
    ++handled;
    bell->Reply(frame.header.seq, 0, "", "");
  });
  absl::StatusOr<std::string> ticket = (*registry)->Issue(4096);
  ASSERT_TRUE(ticket.ok());
  int sock = -1, fd = -1;
  ASSERT_NE(Present(**registry, *ticket, &sock, &fd).id, 0u);
  close(fd);
  const std::string frame = EncodeFrame(kShmPull, 1, "", "");
  ASSERT_EQ(send(sock, frame.data(), frame.size(), MSG_NOSIGNAL), static_cast<ssize_t>(frame.size()));
  EXPECT_TRUE(WaitFor([&] { return handled.load() == 1; }));
  (*registry)->Stop();  // the server shuts down: its store may go
  ASSERT_EQ(send(sock, frame.data(), frame.size(), MSG_NOSIGNAL), static_cast<ssize_t>(frame.size()));
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(handled.load(), 1);
  close(sock);
}

}  // namespace
}  // namespace pstrain
