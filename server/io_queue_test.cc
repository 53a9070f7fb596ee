// IoQueue: a transfer split over requests and threads arrives whole, in
// place, for several callers at once; a failing request's error comes back
// to its caller with the right code.
#include "server/io_queue.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

class IoQueueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = absl::StrCat(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp",
                         "/io_queue_XXXXXX");
    fd_ = mkstemp(path_.data());
    ASSERT_GE(fd_, 0);
  }
  void TearDown() override {
    close(fd_);
    unlink(path_.c_str());
  }
  std::string path_;
  int fd_ = -1;
};

std::vector<char> Pattern(int64_t n, int seed) {
  std::vector<char> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<char>((i * 131 + seed * 7 + i / 4099) & 0xff);
  return v;
}

TEST_F(IoQueueTest, TransfersSplitOverRequestsArriveWholeAndInPlace) {
  IoQueue queue(IoQueueOptions{4, 4096});
  // Not a multiple of the request size, at an offset: the last request is short.
  const int64_t n = 10 * 4096 + 123, offset = 3 * 4096;
  const std::vector<char> in = Pattern(n, 1);
  ASSERT_TRUE(queue.Write(fd_, in.data(), n, offset, path_).ok());
  std::vector<char> out(n, 0);
  ASSERT_TRUE(queue.Read(fd_, out.data(), n, offset, path_).ok());
  EXPECT_EQ(out, in);
  std::vector<char> head(offset, 1);  // nothing before the offset was written
  ASSERT_TRUE(queue.Read(fd_, head.data(), offset, 0, path_).ok());
  EXPECT_EQ(head, std::vector<char>(offset, 0));
}

TEST_F(IoQueueTest, SeveralCallersShareTheQueue) {
  IoQueue queue(IoQueueOptions{3, 1000});
  const int64_t n = 50000;
  std::vector<std::thread> callers;
  std::vector<bool> ok(8, false);
  for (int c = 0; c < 8; ++c) {
    callers.emplace_back([&, c] {
      const std::vector<char> in = Pattern(n, c);
      std::vector<char> out(n);
      ok[c] = queue.Write(fd_, in.data(), n, c * n, path_).ok() &&
              queue.Read(fd_, out.data(), n, c * n, path_).ok() && out == in;
    });
  }
  for (std::thread& t : callers) t.join();
  for (int c = 0; c < 8; ++c) EXPECT_TRUE(ok[c]) << "caller " << c;
}

TEST_F(IoQueueTest, AReadPastTheEndIsDataLoss) {
  IoQueue queue(IoQueueOptions{2, 4096});
  const std::vector<char> in = Pattern(8192, 2);
  ASSERT_TRUE(queue.Write(fd_, in.data(), 8192, 0, path_).ok());
  std::vector<char> out(16384);
  const absl::Status st = queue.Read(fd_, out.data(), 16384, 0, path_);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_NE(st.message().find(path_), std::string::npos) << st;
}

TEST_F(IoQueueTest, AWriteToAReadOnlyDescriptorFailsWithTheErrno) {
  IoQueue queue(IoQueueOptions{2, 4096});
  const int ro = open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(ro, 0);
  const std::vector<char> in = Pattern(20000, 3);
  const absl::Status st = queue.Write(ro, in.data(), 20000, 0, path_);
  close(ro);
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal) << st;  // EBADF
  EXPECT_NE(st.message().find("cannot write"), std::string::npos) << st;
  // The queue goes on serving.
  EXPECT_TRUE(queue.Write(fd_, in.data(), 20000, 0, path_).ok());
}

TEST(ErrnoStatusTest, CodesACallerCanActOn) {
  EXPECT_EQ(ErrnoStatus(ENOENT, "x").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ErrnoStatus(EACCES, "x").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ErrnoStatus(ENOSPC, "x").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoStatus(EIO, "x").code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace pstrain
