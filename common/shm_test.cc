#include "common/shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(ShmLayoutTest, SlotsInChunkOrderAlignedAndWideEnoughForFp32) {
  const ShmLayout layout = ShmLayout::Make({{7, 10}, {3, 100}, {5, 1}});
  EXPECT_EQ(layout.Offset(3), 0);
  EXPECT_EQ(layout.SlotBytes(3), 400);
  EXPECT_EQ(layout.Offset(5), 448);  // 400 rounded up to 64
  EXPECT_EQ(layout.Offset(7), 512);
  EXPECT_EQ(layout.region_bytes(), 576);
  EXPECT_EQ(layout.segment_bytes(), 1152);
  EXPECT_FALSE(layout.Has(4));
}

TEST(ShmSegmentTest, AdoptsASealedSegmentOfTheAgreedSize) {
  absl::StatusOr<std::unique_ptr<ShmSegment>> made = ShmSegment::Create(4096);
  ASSERT_TRUE(made.ok()) << made.status();
  std::memcpy((*made)->data(), "hello", 5);
  absl::StatusOr<std::unique_ptr<ShmSegment>> other = ShmSegment::Adopt(dup((*made)->fd()), 4096);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(std::memcmp((*other)->data(), "hello", 5), 0);
  // Sealed: nobody can shrink it under the other side's mapping.
  EXPECT_NE(ftruncate((*other)->fd(), 0), 0);
}

TEST(ShmSegmentTest, RefusesTheWrongSize) {
  absl::StatusOr<std::unique_ptr<ShmSegment>> made = ShmSegment::Create(4096);
  ASSERT_TRUE(made.ok());
  const absl::StatusOr<std::unique_ptr<ShmSegment>> st = ShmSegment::Adopt(dup((*made)->fd()), 8192);
  EXPECT_EQ(st.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ShmSegmentTest, RefusesADescriptorFromElsewhere) {
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  close(pipe_fds[1]);
  EXPECT_EQ(ShmSegment::Adopt(pipe_fds[0], 4096).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // A memfd of another name, and one not sealed.
  const int foreign = memfd_create("something-else", MFD_CLOEXEC);
  ASSERT_GE(foreign, 0);
  ASSERT_EQ(ftruncate(foreign, 4096), 0);
  EXPECT_EQ(ShmSegment::Adopt(foreign, 4096).status().code(),
            absl::StatusCode::kFailedPrecondition);
  const int unsealed = memfd_create("pstrain-shm", MFD_CLOEXEC);
  ASSERT_GE(unsealed, 0);
  ASSERT_EQ(ftruncate(unsealed, 4096), 0);
  EXPECT_EQ(ShmSegment::Adopt(unsealed, 4096).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ShmSocketTest, PassesADescriptorOverAnAbstractSocket) {
  const std::string name = "pstrain-shm-test-" + std::to_string(getpid());
  absl::StatusOr<int> listener = ListenAbstract(name);
  ASSERT_TRUE(listener.ok()) << listener.status();
  absl::StatusOr<int> client = ConnectAbstract(name, absl::Seconds(5));
  ASSERT_TRUE(client.ok()) << client.status();
  int server = -1;
  for (int i = 0; i < 100 && server < 0; ++i) {
    server = accept(*listener, nullptr, nullptr);
    if (server < 0) usleep(10000);
  }
  ASSERT_GE(server, 0);
  absl::StatusOr<std::unique_ptr<ShmSegment>> made = ShmSegment::Create(4096);
  ASSERT_TRUE(made.ok());
  const ShmGrant sent{42, 4096};
  ASSERT_TRUE(SendWithFd(server, &sent, sizeof(sent), (*made)->fd()).ok());
  ShmGrant got;
  int fd = -1;
  ASSERT_TRUE(RecvWithFd(*client, &got, sizeof(got), &fd).ok());
  EXPECT_EQ(got.id, 42u);
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(ShmSegment::Adopt(fd, 4096).ok());
  close(server);
  // The peer gone: UNAVAILABLE, not a hang.
  EXPECT_EQ(RecvWithFd(*client, &got, sizeof(got), &fd).code(), absl::StatusCode::kUnavailable);
  close(*client);
  close(*listener);
}

TEST(ShmSocketTest, AnotherNameIsNotThere) {
  EXPECT_FALSE(ConnectAbstract("pstrain-shm-test-nobody-listens", absl::Seconds(1)).ok());
}

TEST(FrameReaderTest, TakesWholeFramesHoweverTheBytesArrive) {
  const std::string a = EncodeFrame(kShmPush, 7, "", "push body");
  const std::string b = EncodeFrame(3, 8, "an error", "");
  const std::string both = a + b;
  FrameReader reader;
  ShmFrame frame;
  // One byte at a time: nothing until a frame is whole.
  for (size_t i = 0; i + 1 < a.size(); ++i) {
    reader.Append(both.substr(i, 1));
    EXPECT_FALSE(*reader.Next(&frame));
  }
  reader.Append(both.substr(a.size() - 1));  // the rest of a, all of b
  ASSERT_TRUE(*reader.Next(&frame));
  EXPECT_EQ(frame.header.code, kShmPush);
  EXPECT_EQ(frame.header.seq, 7u);
  EXPECT_EQ(frame.message, "");
  EXPECT_EQ(frame.body, "push body");
  ASSERT_TRUE(*reader.Next(&frame));
  EXPECT_EQ(frame.header.code, 3);
  EXPECT_EQ(frame.header.seq, 8u);
  EXPECT_EQ(frame.message, "an error");
  EXPECT_EQ(frame.body, "");
  EXPECT_FALSE(*reader.Next(&frame));
}

TEST(FrameReaderTest, RefusesBytesThatAreNotFrames) {
  ShmFrameHeader h;
  for (const auto& [bytes, message] :
       {std::pair<uint32_t, uint32_t>{4, 0}, {kMaxShmFrame + 1, 0}, {64, 60}}) {
    h.bytes = bytes;  // too short for its header, too large, a message past the end
    h.message_bytes = message;
    FrameReader reader;
    reader.Append(std::string(reinterpret_cast<const char*>(&h), sizeof(h)));
    ShmFrame frame;
    EXPECT_EQ(reader.Next(&frame).status().code(), absl::StatusCode::kInvalidArgument)
        << bytes << " " << message;
  }
}

}  // namespace
}  // namespace pstrain
